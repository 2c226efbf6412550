package sshdtest_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpumon/gpumon/internal/sshdtest"
)

// A canned answer whose header names other fields than the query asks for
// is refused, as real nvidia-smi never prints one: a test written for an
// old query fails loudly instead of testing what fetch no longer sees.
func TestFakeNvidiaSMIAnswersOnlyTheFieldsAskedFor(t *testing.T) {
	bin, data := t.TempDir(), t.TempDir()
	sshdtest.WriteFakeNvidiaSMI(t, bin, data)
	const apps = "pid, gpu_uuid, used_gpu_memory [MiB]\n42, GPU-a, 100\n"
	sshdtest.SetHostOutput(t, data, "127.0.0.21", "apps", apps, 0)
	sshdtest.SetHostOutput(t, data, "127.0.0.21", "gpu", "No devices were found\n", 6)
	tests := []struct {
		name, arg, out string
		code           int
	}{
		{"the fields of the header", "--query-compute-apps=pid,gpu_uuid,used_gpu_memory", apps, 0},
		{"another field list", "--query-compute-apps=pid,gpu_uuid,process_name,used_gpu_memory",
			"sshdtest fake nvidia-smi: asked for pid,gpu_uuid,process_name,used_gpu_memory but apps.out answers pid,gpu_uuid,used_gpu_memory\n", 2},
		{"a message is not a header", "--query-gpu=index,uuid", "No devices were found\n", 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, "nvidia-smi"), tt.arg, "--format=csv,nounits")
			cmd.Env = []string{"PATH=/usr/bin:/bin", "SSHDTEST_HOST=127.0.0.21"}
			out, err := cmd.Output()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.out || code != tt.code {
				t.Errorf("got %q exit %d, want %q exit %d", out, code, tt.out, tt.code)
			}
		})
	}
}
