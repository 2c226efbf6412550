// Package live wires fetch's live mode (fetch -every) to the render step:
// package fetch polls and writes load_data.csv, package render makes the
// page, and neither imports the other.
package live

import (
	"context"
	"io"
	"time"

	"github.com/gpumon/gpumon/internal/fetch"
	"github.com/gpumon/gpumon/internal/render"
)

// Main is the fetch command with live mode.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return fetch.MainWith(ctx, args, stdout, stderr, NewRenderer)
}

// NewRenderer is fetch.NewRenderer over package render.
func NewRenderer(configPath, csvPath string, every time.Duration, stderr io.Writer) (fetch.Renderer, error) {
	return render.NewLive(configPath, csvPath, every, stderr)
}
