// Command fetch polls every GPU host over SSH and writes load_data.csv.
// See README.md, or run fetch -h.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/fetch"
	"github.com/gpumon/gpumon/internal/render"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := fetch.MainWith(ctx, os.Args[1:], os.Stdout, os.Stderr, publishing)
	stop()
	os.Exit(cli.Exit("fetch", err, os.Stderr))
}

// publishing is live mode's render step: render's config read once, then
// each round's rows published as `render` publishes load_data.csv (the
// history, the page, status.json, metrics.prom, the notifications),
// without reading back the CSV the round just wrote.
func publishing(configPath, csvPath string, every time.Duration, stderr io.Writer) (fetch.PublishRound, error) {
	p, err := render.NewPublisher(configPath, csvPath, every, stderr)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, r *fetch.Round) error {
		return p.Publish(ctx, r.EachRow, r.Start)
	}, nil
}
