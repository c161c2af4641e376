module github.com/mambago/mambago

go 1.26

require (
	github.com/go-python/gopy v0.5.0
	github.com/x448/float16 v0.8.4
	golang.org/x/sys v0.37.0
	gonum.org/v1/gonum v0.17.0
)

require (
	github.com/gonuts/commander v0.1.0 // indirect
	github.com/gonuts/flag v0.1.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	golang.org/x/mod v0.29.0 // indirect
	golang.org/x/sync v0.17.0 // indirect
	golang.org/x/telemetry v0.0.0-20251008203120-078029d740a8 // indirect
	golang.org/x/tools v0.38.0 // indirect
)

tool (
	github.com/go-python/gopy
	golang.org/x/tools/cmd/goimports
)
