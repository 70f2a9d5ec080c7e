# Drives packaging/tsec.fish through fish's own `complete -C`, in a
# folder whose one file is named FILES (so files show as FILES).  The
# cases of completion.cases, answered as completion.sh answers them.
set -l here (pwd)
source $here/packaging/tsec.fish
set -l tmp (mktemp -d)
touch $tmp/FILES
cd $tmp
function c
	echo (complete -C"$argv" | cut -f1 | sort)
end
while read -l l
	c (string replace -r '\|$' '' -- $l)
end < $here/tests/data/cli/completion.cases
cd $here
rm -r $tmp
