-- In-memory database churn for the real-program test: tables filled from
-- recursive CTEs, indexes built, joins, aggregates, updates and deletes.
CREATE TABLE a(id INTEGER PRIMARY KEY, k INTEGER, s TEXT, b BLOB);
CREATE TABLE b(id INTEGER PRIMARY KEY, a_id INTEGER, v REAL, t TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO a SELECT x, (x * 7919) % 10007, printf('name-%08d-%s', x, substr('abcdefghijklmnopqrstuvwxyz', 1 + x % 26)), zeroblob(x % 300) FROM c;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
INSERT INTO b SELECT x, 1 + (x * 104729) % 200000, (x % 1000) / 7.0, upper(printf('%x', x * 31)) || printf('%x', x % 977) FROM c;
CREATE INDEX a_k ON a(k);
CREATE INDEX a_s ON a(s);
CREATE INDEX b_a ON b(a_id, v);
SELECT count(*), sum(k), max(s), min(s) FROM a;
SELECT count(*), round(sum(v), 3), max(t) FROM b;
SELECT k, count(*) AS n, round(avg(length(b)), 3) FROM a GROUP BY k ORDER BY n DESC, k LIMIT 10;
SELECT a.k, round(sum(b.v), 3), count(*) FROM a JOIN b ON b.a_id = a.id WHERE a.k < 50 GROUP BY a.k ORDER BY a.k LIMIT 20;
UPDATE a SET s = s || '-updated-' || k WHERE id % 3 = 0;
DELETE FROM b WHERE id % 5 = 0;
SELECT count(*), sum(length(s)) FROM a;
SELECT group_concat(t, ';') FROM (SELECT t FROM b ORDER BY v DESC, id LIMIT 50);
CREATE TABLE c AS SELECT k, group_concat(s, ',') AS all_s FROM a GROUP BY k;
SELECT count(*), sum(length(all_s)), max(length(all_s)) FROM c;
DROP INDEX a_s;
REINDEX;
SELECT s FROM a WHERE k = 4242 ORDER BY s;
VACUUM;
SELECT count(*) FROM a WHERE s LIKE '%updated%';
