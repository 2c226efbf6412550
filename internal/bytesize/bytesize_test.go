package bytesize

import "testing"

func TestExact(t *testing.T) {
	tests := []struct {
		name string
		n    int64
		want string
	}{
		{"zero", 0, "0 bytes"},
		{"bytes", 600, "600 bytes"},
		{"whole KiB", 64 << 10, "64 KiB"},
		{"whole MiB", 1 << 20, "1 MiB"},
		{"whole GiB", 2 << 30, "2 GiB"},
		{"MiB, not a whole GiB", 1536 << 20, "1536 MiB"},
		{"one byte short of a MiB", 1<<20 - 1, "1048575 bytes"},
		{"not a whole KiB", 1500, "1500 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Exact(tt.n); got != tt.want {
				t.Errorf("Exact(%d) = %q, want %q", tt.n, got, tt.want)
			}
		})
	}
}

func TestAbout(t *testing.T) {
	tests := []struct {
		name string
		n    int64
		want string
	}{
		{"zero", 0, "0 bytes"},
		{"bytes", 1023, "1023 bytes"},
		{"one KiB", 1 << 10, "1.0 KiB"},
		{"a KiB and a half", 1536, "1.5 KiB"},
		{"rounds down", 1<<20 + 1<<10, "1.0 MiB"},
		{"rounds up", 1<<20*12 + 1<<20*96/100, "13.0 MiB"},
		{"rounds up to the next unit", 1<<20 - 1, "1.0 MiB"},
		{"just below the next unit", 1<<20 - 60<<10, "964.0 KiB"},
		{"whole GiB", 70 << 30, "70.0 GiB"},
		{"GiB", 70000 << 20, "68.4 GiB"},
		{"beyond the largest unit", 5000 << 30, "5000.0 GiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := About(tt.n); got != tt.want {
				t.Errorf("About(%d) = %q, want %q", tt.n, got, tt.want)
			}
		})
	}
}

func TestAboutMiB(t *testing.T) {
	tests := []struct {
		mib  float64
		want string
	}{{500, "500.0 MiB"}, {71680, "70.0 GiB"}, {70000, "68.4 GiB"}, {0.5, "512.0 KiB"}, {1023.99, "1.0 GiB"}}
	for _, tt := range tests {
		if got := AboutMiB(tt.mib); got != tt.want {
			t.Errorf("AboutMiB(%v) = %q, want %q", tt.mib, got, tt.want)
		}
	}
}
