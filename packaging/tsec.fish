# fish completion for tsec (installed to share/fish/vendor_completions.d/tsec.fish)
set -l cmds check eval can lint test fmt inspect verify replay diff keygen sign store lock cert stats health reload policy help
set -l actions storage.store storage.load storage.exists storage.delete storage.list storage.stat storage.move lock.acquire lock.renew lock.release
complete -c tsec -f
complete -c tsec -n "not __fish_seen_subcommand_from $cmds" -a "$cmds"
complete -c tsec -n "not __fish_seen_subcommand_from $cmds" -l version -d 'print the version'
complete -c tsec -l help -s h -d 'help'
complete -c tsec -l json -d 'JSON output'
complete -c tsec -n "__fish_seen_subcommand_from check eval store lock cert stats health reload policy" -l endpoint -r -d 'tcp://host:port or ipc://path'
complete -c tsec -n "__fish_seen_subcommand_from check eval store lock cert stats health reload policy" -l server-key -r -F
complete -c tsec -n "__fish_seen_subcommand_from check eval store lock cert stats health reload policy sign inspect verify" -l key -r -F
complete -c tsec -n "__fish_seen_subcommand_from check eval store lock cert stats health reload policy" -l timeout-ms -r
complete -c tsec -n "__fish_seen_subcommand_from check eval" -l action -r -a "$actions"
complete -c tsec -n "__fish_seen_subcommand_from check eval" -l resource -r
complete -c tsec -n "__fish_seen_subcommand_from check eval" -l ttl-ms -r
complete -c tsec -n "__fish_seen_subcommand_from check eval" -l size -r
complete -c tsec -n "__fish_seen_subcommand_from check eval" -l dest -r
complete -c tsec -n "__fish_seen_subcommand_from check eval" -l cert-file -r -F
complete -c tsec -n "__fish_seen_subcommand_from check eval" -l now -r
complete -c tsec -n "__fish_seen_subcommand_from check eval test replay" -l policy -r -F
complete -c tsec -n "__fish_seen_subcommand_from diff" -l log -r -F
complete -c tsec -n "__fish_seen_subcommand_from check eval" -l principal -r
complete -c tsec -n "__fish_seen_subcommand_from check eval" -l role -r
complete -c tsec -n "__fish_seen_subcommand_from check" -l input -r -F
complete -c tsec -n "__fish_seen_subcommand_from lint" -l strict -d 'names against a schema'
complete -c tsec -n "__fish_seen_subcommand_from lint" -l schema -r -F
complete -c tsec -n "__fish_seen_subcommand_from lint sign check eval test" -l module -r -F
complete -c tsec -n "__fish_seen_subcommand_from fmt" -s w -d 'rewrite the files'
complete -c tsec -n "__fish_seen_subcommand_from fmt" -l check -d 'exit 1 if not canonical'
complete -c tsec -n "__fish_seen_subcommand_from test" -l coverage
complete -c tsec -n "__fish_seen_subcommand_from test" -s v
complete -c tsec -n "__fish_seen_subcommand_from test" -l run -r
complete -c tsec -n "__fish_seen_subcommand_from stats" -l prometheus
complete -c tsec -n "__fish_seen_subcommand_from store" -s r -d recursive
complete -c tsec -n "__fish_seen_subcommand_from store; and not __fish_seen_subcommand_from put get ls rm mv" -a "put get ls rm mv"
complete -c tsec -n "__fish_seen_subcommand_from lock; and not __fish_seen_subcommand_from acquire renew release" -a "acquire renew release"
complete -c tsec -n "__fish_seen_subcommand_from lock" -l ttl-ms -r
complete -c tsec -n "__fish_seen_subcommand_from lock" -l wait-ms -r
complete -c tsec -n "__fish_seen_subcommand_from cert; and not __fish_seen_subcommand_from save load publish fetch exists archive sweep" -a "save load publish fetch exists archive sweep"
complete -c tsec -n "__fish_seen_subcommand_from policy; and not __fish_seen_subcommand_from publish" -a publish
complete -c tsec -n "__fish_seen_subcommand_from keygen" -l curve -r -F
complete -c tsec -n "__fish_seen_subcommand_from keygen" -l sign -r -F
complete -c tsec -n "__fish_seen_subcommand_from keygen" -l force
complete -c tsec -n "__fish_seen_subcommand_from lint fmt inspect verify sign test policy cert replay diff" -F
