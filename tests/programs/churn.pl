# Hash and sort churn for the real-program test: hashes of strings and
# arrays are filled, sorted, deleted from and rebuilt; a deterministic digest
# of the results is printed.
use strict;
use warnings;

my $rounds = shift // 10;
my $seed = 12345;
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed; }

my $digest = 0;
sub mix { my ($s) = @_; for my $c (unpack("C*", $s)) { $digest = ($digest * 31 + $c) % 4294967291; } }

for my $r (1 .. $rounds) {
    my %h;
    for my $i (1 .. 60000) {
        my $k = "key" . (rnd() % 50000);
        push @{ $h{$k} }, rnd() % 1000;
        $h{"s$i"} = "v" x (rnd() % 200) if $i % 3 == 0;
    }
    my @keys = sort { $a cmp $b } keys %h;
    delete $h{$_} for grep { /7$/ } @keys;
    my @nums = sort { $a <=> $b } map { ref $h{$_} ? scalar(@{ $h{$_} }) : length $h{$_} } keys %h;
    my @words = sort map { scalar reverse $_ } grep { defined } @keys[0 .. 999];
    my $joined = join(",", @words[0 .. 99]);
    mix($joined);
    mix(join(":", @nums[0 .. 199], @nums[-200 .. -1]));
    my %inv;
    while (my ($k, $v) = each %h) { $inv{ ref $v ? "@$v" : $v } .= $k; }
    mix(scalar(keys %inv) . "/" . scalar(@keys));
    printf "round %d keys %d distinct %d digest %d\n", $r, scalar(@keys), scalar(keys %inv), $digest;
}
print "digest $digest\n";
