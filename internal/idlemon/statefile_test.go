package idlemon

import (
	"io/fs"
	"syscall"
	"testing"
	"time"
)

type fakeInfo struct {
	mode fs.FileMode
	uid  uint32
}

func (f fakeInfo) Name() string       { return "state.json" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return &syscall.Stat_t{Uid: f.uid} }

// Which state files a restarted idlemon believes when it looks for what
// the killed one left running: only one nobody else could have written.
func TestDistrust(t *testing.T) {
	const root, idle, bob = 0, 998, 1000
	dir := func(mode fs.FileMode, uid uint32) fakeInfo { return fakeInfo{fs.ModeDir | mode, uid} }
	tests := []struct {
		name      string
		file, dir fakeInfo
		euid      int
		want      string
	}{
		{"root's file in /run/idlemon", fakeInfo{0o644, root}, dir(0o755, root), root, ""},
		{"idlemon's own user's file in its folder", fakeInfo{0o644, idle}, dir(0o755, idle), idle, ""},
		{"idlemon's own user's file in root's folder", fakeInfo{0o600, idle}, dir(0o755, root), idle, ""},
		{"another user's file", fakeInfo{0o644, bob}, dir(0o755, root), root, "it belongs to uid 1000, not to idlemon's uid 0"},
		{"group-writable", fakeInfo{0o664, root}, dir(0o755, root), root, "others may write it (mode 0664)"},
		{"world-writable", fakeInfo{0o666, root}, dir(0o755, root), root, "others may write it (mode 0666)"},
		{"in /tmp", fakeInfo{0o644, root}, dir(0o777|fs.ModeSticky, root), root, "others may write its folder (mode 1777)"},
		{"in another user's folder", fakeInfo{0o644, root}, dir(0o755, bob), root, "its folder belongs to uid 1000"},
		{"a symbolic link", fakeInfo{fs.ModeSymlink | 0o777, root}, dir(0o755, root), root, "it is a symbolic link; others may write it (mode 0777)"},
		{"a fifo", fakeInfo{fs.ModeNamedPipe | 0o644, root}, dir(0o755, root), root, "it is not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := distrust(tt.file, tt.dir, tt.euid); got != tt.want {
				t.Errorf("distrust = %q, want %q", got, tt.want)
			}
		})
	}
}

// A fifo in the state file's place: status and available say so at once
// instead of waiting for a writer that never comes.
func TestReadStateNotAFile(t *testing.T) {
	path := t.TempDir() + "/state.json"
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readState(path); err == nil || err.Error() != path+": not a regular file" {
		t.Errorf("readState(fifo) = %v", err)
	}
}
