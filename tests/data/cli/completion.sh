# Drives packaging/tsec.bash-completion without bash-completion itself:
# _init_completion and _filedir stand in (files show as FILES).  Each
# line of output is what one command line completes to.
source packaging/tsec.bash-completion
_init_completion() {
	cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}
	words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
}
_filedir() { COMPREPLY=(FILES); }
c() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _tsec; echo "${COMPREPLY[*]}"; }
c tsec --endpoint ipc://x st
c tsec --endpoint ipc://x store put KEY ""
c tsec store put KEY ""
c tsec store g
c tsec --json check --act
c tsec ca
