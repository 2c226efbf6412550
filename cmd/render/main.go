// Command render turns load_data.csv into a static status page,
// status.json, metrics.prom or a terminal table. See README.md, or run
// render -h.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/render"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := render.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit("render", err, os.Stderr))
}
