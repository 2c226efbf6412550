// Command simfleet runs a simulated fleet of GPU hosts for `make demo`: SSH
// servers on 127.0.X.Y that answer gpumon's probe with real nvidia-smi
// captures. It writes the files a client needs (key, ssh_config,
// known_hosts, config.ini) into -dir, prints one line naming config.ini
// once every host listens, and runs until SIGINT or SIGTERM.
//
//	simfleet -dir DIR [-n N] [-seed S]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/gpumon/gpumon/internal/simfleet"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "simfleet: error: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("simfleet", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory to write id_ed25519, ssh_config, known_hosts and config.ini into (required)")
	n := fs.Int("n", 0, "simulate `N` generated healthy hosts instead of the demo fleet")
	seed := fs.Int64("seed", 1, "seed for the generated hosts (with -n)")
	cpuProfile := fs.String("cpuprofile", "", "write the fleet's CPU profile to `FILE` when it stops (go tool pprof reads it)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: simfleet -dir DIR [-n N] [-seed S] [-cpuprofile FILE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *dir == "" {
		return fmt.Errorf("-dir is required")
	}
	if *n < 0 {
		return fmt.Errorf("-n must not be negative")
	}
	specs := simfleet.Demo()
	if *n > 0 {
		specs = simfleet.Generate(*n, *seed)
	}
	if *cpuProfile != "" {
		pf, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			pf.Close()
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f, err := simfleet.Launch(specs)
	if err != nil {
		return err
	}
	defer f.Close()
	cf, err := f.WriteClientFiles(*dir)
	if err != nil {
		return err
	}
	fmt.Printf("simfleet: %d hosts listening; config: %s\n", len(specs), cf.ConfigINI)
	<-ctx.Done()
	s := f.Stats()
	fmt.Printf("simfleet: stopping after %d connections, %d sessions\n", s.Accepted, s.Sessions)
	return nil
}
