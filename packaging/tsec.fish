# fish completion for tsec (installed to share/fish/vendor_completions.d/tsec.fish)
set -l cmds check eval can lint test fmt inspect verify replay diff keygen sign store lock cert stats health reload policy help
set -l actions storage.store storage.load storage.exists storage.delete storage.list storage.stat storage.move lock.acquire lock.renew lock.release cert.publish cert.load cert.exists cert.archive cert.obtain
# The command is the first word that is not an option: global options
# (with their values) may come before it, as in bash and zsh.
function __tsec_args -d 'the words from the command on'
	set -l toks (commandline -opc)
	set -e toks[1]
	set -l skip 0
	for i in (seq (count $toks))
		if test $skip = 1
			set skip 0
			continue
		end
		switch $toks[$i]
			case --endpoint --server-key --key --timeout-ms --module
				set skip 1
			case '-*'
			case '*'
				printf '%s\n' $toks[$i..-1]
				return 0
		end
	end
	return 1
end
function __tsec_no_cmd
	not __tsec_args > /dev/null
end
function __tsec_using -d 'the command is one of argv'
	set -l a (__tsec_args); or return 1
	contains -- $a[1] $argv
end
function __tsec_sub -d 'the command is argv[1], its subcommand not yet given'
	set -l a (__tsec_args); or return 1
	test "$a[1]" = $argv[1]; and test (count $a) -eq 1
end
# (commandline -opc holds the words before the cursor's: the command
# alone means its first argument is being typed.)
function __tsec_put_file -d 'store put KEY, then the file'
	set -l a (__tsec_args); or return 1
	test "$a[1]" = store; and test "$a[2]" = put; and test (count $a) -eq 3
end
complete -c tsec -f
complete -c tsec -n __tsec_no_cmd -a "$cmds"
complete -c tsec -n __tsec_no_cmd -l version -d 'print the version'
complete -c tsec -n __tsec_no_cmd -l endpoint -x -d 'tcp://host:port or ipc://path'
complete -c tsec -n __tsec_no_cmd -l server-key -r -F
complete -c tsec -n __tsec_no_cmd -l key -r -F
complete -c tsec -n __tsec_no_cmd -l timeout-ms -x
complete -c tsec -l help -s h -d 'help'
complete -c tsec -l json -d 'JSON output'
complete -c tsec -n '__tsec_using check eval store lock cert stats health reload policy' -l endpoint -x -d 'tcp://host:port or ipc://path'
complete -c tsec -n '__tsec_using check eval store lock cert stats health reload policy' -l server-key -r -F
complete -c tsec -n '__tsec_using check eval store lock cert stats health reload policy sign inspect verify' -l key -r -F
complete -c tsec -n '__tsec_using check eval store lock cert stats health reload policy' -l timeout-ms -x
complete -c tsec -n '__tsec_using check eval' -l action -x -a "$actions"
complete -c tsec -n '__tsec_using check eval' -l resource -x
complete -c tsec -n '__tsec_using check eval' -l ttl-ms -x
complete -c tsec -n '__tsec_using check eval' -l size -x
complete -c tsec -n '__tsec_using check eval' -l dest -x
complete -c tsec -n '__tsec_using check eval' -l cert-file -r -F
complete -c tsec -n '__tsec_using check eval' -l now -x
complete -c tsec -n '__tsec_using check eval test replay' -l policy -r -F
complete -c tsec -n '__tsec_using diff' -l log -r -F
complete -c tsec -n '__tsec_using check eval' -l principal -x
complete -c tsec -n '__tsec_using check eval' -l role -x
complete -c tsec -n '__tsec_using check' -l input -r -F
complete -c tsec -n '__tsec_using lint' -l strict -d 'names against a schema'
complete -c tsec -n '__tsec_using lint' -l schema -r -F
complete -c tsec -n '__tsec_using lint sign check eval test can' -l module -r -F
complete -c tsec -n '__tsec_using can' -l policy -r -F
complete -c tsec -n '__tsec_using can' -l role -x
complete -c tsec -n '__tsec_using fmt' -s w -d 'rewrite the files'
complete -c tsec -n '__tsec_using fmt' -l check -d 'exit 1 if not canonical'
complete -c tsec -n '__tsec_using test' -l coverage
complete -c tsec -n '__tsec_using test' -l min-coverage -x
complete -c tsec -n '__tsec_using test' -s v
complete -c tsec -n '__tsec_using test' -l run -x
complete -c tsec -n '__tsec_using stats' -l prometheus
complete -c tsec -n '__tsec_using store' -s r -d recursive
complete -c tsec -n __tsec_put_file -F
complete -c tsec -n '__tsec_sub store' -a "put get ls rm mv"
complete -c tsec -n '__tsec_sub lock' -a "acquire renew release"
complete -c tsec -n '__tsec_using lock' -l ttl-ms -x
complete -c tsec -n '__tsec_using lock' -l wait-ms -x
complete -c tsec -n '__tsec_sub cert' -a "save load publish fetch exists archive recover sweep"
complete -c tsec -n '__tsec_sub policy' -a publish
complete -c tsec -n '__tsec_using keygen' -l curve -r -F
complete -c tsec -n '__tsec_using keygen' -l sign -r -F
complete -c tsec -n '__tsec_using keygen' -l force
complete -c tsec -n '__tsec_using lint fmt inspect verify sign test policy replay diff' -F
complete -c tsec -n '__tsec_using cert; and not __tsec_sub cert' -F
complete -c tsec -n '__tsec_sub help' -a "$(string match -v help $cmds)"
