# Drives packaging/tsec.bash-completion as bash does, from COMP_LINE and
# COMP_POINT, with no bash-completion package; run in a folder whose one
# file is FILES (so files show as FILES).  Each line of output is what
# one command line completes to, as the shell would insert it.
here=$(pwd)
source "$here/packaging/tsec.bash-completion"
tmp=$(mktemp -d)
touch "$tmp/FILES"
cd "$tmp" || exit 1
c() { COMP_LINE=$1; COMP_POINT=${#1}; COMPREPLY=(); _tsec; echo "${COMPREPLY[*]}"; }
while IFS= read -r l; do
	c "${l%|}" | tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ *$//'
	echo
done < "$here/tests/data/cli/completion.cases"
cd "$here" && rm -r "$tmp"
