# Perl hash and sort churn for the tidemalloc benchmarks. Fixed work, fixed seed.
use strict;
use warnings;

my $rounds = shift // 8;
srand(4321);
my $total = 0;
for my $r (1 .. $rounds) {
    my %h;
    for my $i (1 .. 60000) {
        my $k = join("-", "k", int(rand(1e9)), $i);
        $h{$k} = [ $i, "v" x (1 + $i % 40), { n => $i } ];
    }
    my @keys = sort { $a cmp $b } keys %h;
    my @byn = sort { $h{$a}[0] <=> $h{$b}[0] } @keys[0 .. 19999];
    $total += scalar(@byn) + length($keys[0]);
    delete @h{ @keys[ grep { $_ % 2 } 0 .. $#keys ] };
    my @words = map { lc(reverse($_)) } keys %h;
    $total += scalar(@words);
}
print "perl_churn $rounds $total\n";
