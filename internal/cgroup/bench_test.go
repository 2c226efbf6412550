package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkCreateAddRemove is the cgroup cost of starting and ending one
// run, limits included (v1 folders too on a hybrid host): Create, Add of
// a process, the process moved out, Remove.
func BenchmarkCreateAddRemove(b *testing.B) {
	tr := newTree(b)
	park := filepath.Join(tr.Dir, "park")
	if err := os.Mkdir(park, 0o755); err != nil {
		b.Fatal(err)
	}
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	pid := strconv.Itoa(sleeper.Process.Pid)
	l := Limits{CPUWeight: 1, MemoryMax: 1 << 30, PidsMax: 100}
	for b.Loop() {
		g := create(b, tr, "bench", l)
		if err := g.Add(sleeper.Process.Pid); err != nil {
			b.Fatal(err)
		}
		// Out again, to the tree's folders, so that g can go.
		for _, dir := range append([]string{park}, parents(g)...) {
			if err := writeFile(filepath.Join(dir, "cgroup.procs"), pid); err != nil {
				b.Fatal(err)
			}
		}
		if err := g.Remove(); err != nil {
			b.Fatal(err)
		}
	}
}

// parents are the folders above g's v1 folders.
func parents(g *Group) []string {
	var dirs []string
	for _, d := range g.v1Dirs() {
		dirs = append(dirs, filepath.Dir(d))
	}
	return dirs
}

// BenchmarkKill is a stop: Kill of a group of 10 sleepers and their shell,
// and WaitEmpty until the kernel says it is empty.
func BenchmarkKill(b *testing.B) {
	for _, way := range []string{"cgroup.kill", "freeze and signal"} {
		b.Run(way, func(b *testing.B) {
			tr := newTree(b)
			tr.CanKill = tr.CanKill && way == "cgroup.kill"
			for b.Loop() {
				b.StopTimer()
				g := create(b, tr, "bench", Limits{})
				j := startIn(b, g, "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 60 & done; wait")
				waitProcs(b, g, 11)
				b.StartTimer()
				if err := g.Kill(); err != nil {
					b.Fatal(err)
				}
				if !g.WaitEmpty(time.Now().Add(5 * time.Second)) {
					b.Fatal("not empty 5 s after Kill")
				}
				b.StopTimer()
				_ = j.wait(b)
				if err := g.Remove(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkFreezeThaw freezes a group with a spinning shell until the
// kernel says frozen, then thaws it.
func BenchmarkFreezeThaw(b *testing.B) {
	tr := newTree(b)
	g := create(b, tr, "bench", Limits{})
	startIn(b, g, "while :; do :; done")
	for b.Loop() {
		if err := g.Freeze(time.Now().Add(5 * time.Second)); err != nil {
			b.Fatal(err)
		}
		if err := g.Thaw(); err != nil {
			b.Fatal(err)
		}
	}
}
