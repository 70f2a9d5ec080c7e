# Drives packaging/tsec.fish through fish's own `complete -C`, in a
# folder whose one file is named FILES (so files show as FILES).  The
# same cases as completion.sh, with the same answers.
set -l here (pwd)
source $here/packaging/tsec.fish
set -l tmp (mktemp -d)
touch $tmp/FILES
cd $tmp
function c
	echo (complete -C"$argv" | cut -f1 | sort)
end
c 'tsec --endpoint ipc://x st'
c 'tsec --endpoint ipc://x store put KEY '
c 'tsec store put KEY '
c 'tsec store g'
c 'tsec --json check --act'
c 'tsec ca'
cd $here
rm -r $tmp
