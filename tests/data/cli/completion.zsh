# Drives packaging/tsec.zsh-completion without compsys: compadd and
# _files stand in (files show as FILES), and the words are the line's,
# split as zsh splits them.  The cases of completion.cases, answered as
# completion.sh answers them.
compadd() {
	local w
	[[ $1 == -- ]] && shift
	for w in "$@"; do
		[[ $w == ${PREFIX}* ]] && out+=($w)
	done
}
_files() { out+=(FILES) }
out=()
source packaging/tsec.zsh-completion
c() {
	local line=$1
	words=(${(z)line})
	[[ $line == *' ' ]] && words+=('')
	CURRENT=${#words}; PREFIX=${words[CURRENT]}; out=(); _tsec
	print -r -- ${(j: :)${(o)out}}
}
while IFS= read -r l; do
	c "${l%|}"
done < tests/data/cli/completion.cases
