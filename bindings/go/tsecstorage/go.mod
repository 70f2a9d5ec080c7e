module tinysecurity.dev/tsecstorage

go 1.19

require (
	github.com/caddyserver/certmagic v0.17.2
	golang.org/x/crypto v0.0.0-20220722155217-630584e8d5aa
)
