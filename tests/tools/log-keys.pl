#!/usr/bin/env perl
# Every log line's keys, from the format strings of log_debug/info/warn/error: none twice,
# and none of the three log_emit writes itself (ts, level, event).
local $/;
my $bad = 0;
for my $file (@ARGV) {
    open(my $fh, '<', $file) or next;
    my $text = <$fh>;
    while ($text =~ /\blog_(?:debug|info|warn|error)\(\s*"([^"]*)"\s*,\s*((?:"(?:[^"\\]|\\.)*"\s*)+)/sg) {
        my ($event, $lits) = ($1, $2);
        my $fmt = join('', $lits =~ /"((?:[^"\\]|\\.)*)"/g);
        my %seen = (ts => 1, level => 1, event => 1);
        while ($fmt =~ /(?:^|\s)([a-z_][a-z0-9_]*)=/g) {
            if ($seen{$1}++) { print "$file: $event: key $1 twice (log_emit writes ts, level and event)\n"; $bad = 1; }
        }
    }
}
exit $bad;
