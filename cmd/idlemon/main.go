// Command idlemon runs low-priority jobs on the idle GPUs of the machine it
// runs on and stops them the moment anybody else opens one of those GPUs.
// See README.md, or run idlemon -h.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/idlemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := idlemon.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit("idlemon", err, os.Stderr))
}
