// Command demo is `make demo`: a simulated fleet of GPU hosts, fetch and
// render over it, and the page served on http://127.0.0.1:8080 until Ctrl-C.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := demo.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit("demo", err, os.Stderr))
}
