package sshdtest

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeNvidiaSMI is the script; %DATA% becomes the quoted data directory.
const fakeNvidiaSMI = `#!/bin/sh
# Fake nvidia-smi written by github.com/gpumon/gpumon/internal/sshdtest.
# It plays the host whose address sshd accepted the connection on: the third
# field of SSH_CONNECTION (SSHDTEST_HOST overrides it, for use without ssh).
# Per host, in DATA/<addr>/: QUERY.out is printed and QUERY.rc is the exit
# code (default 0), QUERY being gpu for --query-gpu=, apps for
# --query-compute-apps=, other otherwise; "hang" or QUERY.hang makes it sleep.
# Nothing for the host or the query: what the real one says without a GPU.
# Like the real one it answers only the fields asked for: when QUERY.out
# starts with a CSV header of several fields that are not the ones asked for
# (units aside), it says so
# and exits 2, so a test's canned answer cannot drift from the probe's query.
DATA=%DATA%
host=${SSHDTEST_HOST:-}
if [ -z "$host" ]; then
	c=${SSH_CONNECTION:-}
	c=${c#* }
	c=${c#* }
	host=${c%% *}
fi
q=other fields=
for a in "$@"; do
	case $a in
	--query-gpu=*) q=gpu fields=${a#*=} ;;
	--query-compute-apps=*) q=apps fields=${a#*=} ;;
	esac
done
d=$DATA/$host
if [ -n "$host" ] && [ -d "$d" ]; then
	printf '%s\n' "$*" >>"$d/calls" 2>/dev/null || :
	if [ -e "$d/hang" ] || [ -e "$d/$q.hang" ]; then
		exec sleep 3600
	fi
	if [ -f "$d/$q.out" ]; then
		hdr=$(sed -n '1{s/ \[[^]]*\]//g;s/, /,/g;p;}' "$d/$q.out")
		case $hdr in
		[a-z]*,*) case $hdr in *[!a-z0-9._,]*) hdr= ;; esac ;;
		*) hdr= ;; # one word is as likely a message as a header
		esac
		if [ -n "$fields" ] && [ -n "$hdr" ] && [ "$hdr" != "$fields" ]; then
			echo "sshdtest fake nvidia-smi: asked for $fields but $q.out answers $hdr"
			exit 2
		fi
		cat "$d/$q.out"
		rc=0
		if [ -f "$d/$q.rc" ]; then
			read -r rc <"$d/$q.rc"
		fi
		exit "$rc"
	fi
fi
echo "No devices were found"
exit 6
`

// shQuote quotes s for POSIX sh.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// WriteFakeNvidiaSMI writes the fake nvidia-smi (a POSIX sh script, 0755) into
// binDir, answering from dataDir (baked into the script). Both directories are
// made readable by all users; make them with TempDir when users other than
// root log in. Prepare answers with SetHostOutput, SetHostHang, SetQueryHang.
func WriteFakeNvidiaSMI(t testing.TB, binDir, dataDir string) {
	t.Helper()
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	for _, d := range []string{binDir, abs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("sshdtest: %v", err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatalf("sshdtest: %v", err)
		}
	}
	script := strings.Replace(fakeNvidiaSMI, "%DATA%", shQuote(abs), 1)
	if err := writeAtomic(filepath.Join(binDir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
}

// hostPath returns dataDir/<addr>; hostAddr may carry a port.
func hostPath(t testing.TB, dataDir, hostAddr string) string {
	t.Helper()
	h := hostAddr
	if host, _, err := net.SplitHostPort(hostAddr); err == nil {
		h = host
	}
	if ip := net.ParseIP(h); ip != nil {
		h = ip.String()
	}
	if h == "" || strings.ContainsAny(h, "/\x00") || h == "." || h == ".." {
		t.Fatalf("sshdtest: bad host address %q", hostAddr)
	}
	return filepath.Join(dataDir, h)
}

// hostDir returns and makes dataDir/<addr>.
func hostDir(t testing.TB, dataDir, hostAddr string) string {
	t.Helper()
	d := hostPath(t, dataDir, hostAddr)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	// Any user's nvidia-smi may append to the call log.
	calls := filepath.Join(d, "calls")
	if f, err := os.OpenFile(calls, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666); err == nil {
		f.Close()
		_ = os.Chmod(calls, 0o666)
	}
	return d
}

func checkQuery(t testing.TB, query string) {
	t.Helper()
	if query == "" || strings.ContainsAny(query, "/.\x00") {
		t.Fatalf("sshdtest: bad query name %q (want gpu, apps or other)", query)
	}
}

// SetHostOutput makes the fake nvidia-smi on hostAddr (e.g. "127.0.0.11";
// a port is ignored) print out exactly (give the trailing newline) and exit
// with exitCode for query: "gpu" (--query-gpu=), "apps"
// (--query-compute-apps=) or "other" (any other arguments). Files are
// replaced atomically, so a test may change them while a fetch runs.
//
// When out starts with a CSV header of several fields, they (units aside)
// must be the ones the caller asks for, in order, as real nvidia-smi's
// would be: fetch asks for probe.GPUFields and probe.AppFields (no
// process_name). Otherwise the fake prints what differs and exits 2.
func SetHostOutput(t testing.TB, dataDir, hostAddr string, query string, out string, exitCode int) {
	t.Helper()
	checkQuery(t, query)
	d := hostDir(t, dataDir, hostAddr)
	if err := writeAtomic(filepath.Join(d, query+".rc"), []byte(strconv.Itoa(exitCode)+"\n"), 0o644); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	if err := writeAtomic(filepath.Join(d, query+".out"), []byte(out), 0o644); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
}

// SetHostHang makes every nvidia-smi call on hostAddr sleep (an hour) without
// output, as a wedged driver does.
func SetHostHang(t testing.TB, dataDir, hostAddr string) {
	t.Helper()
	d := hostDir(t, dataDir, hostAddr)
	if err := writeAtomic(filepath.Join(d, "hang"), nil, 0o644); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
}

// SetQueryHang makes only query ("gpu", "apps", "other") hang on hostAddr.
func SetQueryHang(t testing.TB, dataDir, hostAddr, query string) {
	t.Helper()
	checkQuery(t, query)
	d := hostDir(t, dataDir, hostAddr)
	if err := writeAtomic(filepath.Join(d, query+".hang"), nil, 0o644); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
}

// Calls returns the argument lists nvidia-smi was run with on hostAddr, one
// string per call (arguments joined by spaces), oldest first. Only hosts with
// something prepared (a data directory) record calls.
func Calls(t testing.TB, dataDir, hostAddr string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(hostPath(t, dataDir, hostAddr), "calls"))
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatalf("sshdtest: %v", err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\n")
}

// writeAtomic writes name through a temporary file in the same directory and
// a rename, with mode regardless of the umask.
func writeAtomic(name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp-")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), mode)
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
