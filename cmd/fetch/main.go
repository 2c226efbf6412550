// Command fetch polls every GPU host over SSH and writes load_data.csv.
// See README.md, or run fetch -h.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/live"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := live.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit("fetch", err, os.Stderr))
}
