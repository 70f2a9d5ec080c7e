# Drives packaging/tsec.zsh-completion without compsys: compadd and
# _files stand in (files show as FILES).  The same cases as
# completion.sh, with the same answers.
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
c() { words=("$@"); CURRENT=$#; PREFIX=${words[CURRENT]}; out=(); _tsec; echo "${out[*]}" }
c tsec --endpoint ipc://x st
c tsec --endpoint ipc://x store put KEY ""
c tsec store put KEY ""
c tsec store g
c tsec --json check --act
c tsec ca
