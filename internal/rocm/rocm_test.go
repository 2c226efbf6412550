package rocm

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/nvsmi"
)

func n(v float64) nvsmi.Number { return nvsmi.Number{Value: v, Valid: true} }

var na = nvsmi.Number{}

// gpu is a GPU with every reading missing, to be filled by the case.
func gpu(i int, name, bus string) nvsmi.GPU {
	return nvsmi.GPU{Index: i, Name: name, BusID: bus}
}

func with(g nvsmi.GPU, set func(*nvsmi.GPU)) nvsmi.GPU {
	set(&g)
	return g
}

// mi100 is one of the four MI100s of telegraf's ROCm 6.0.2 capture:
// rocm-smi gives no fan (passive card) and no ECC in JSON.
func mi100(i int, uuid, bus string, tempC, powerW float64) nvsmi.GPU {
	return with(gpu(i, "AMD Instinct MI100", bus), func(g *nvsmi.GPU) {
		g.UUID = uuid
		g.UtilGPU, g.UtilMem = n(0), n(0)
		g.MemUsedMiB, g.MemTotalMiB = n(6), n(32752)
		g.TempC, g.PowerW, g.PowerLimitW = n(tempC), n(powerW), n(290)
	})
}

// rx6700xt is telegraf's RX 6700 XT as every release reads it; the
// releases differ in the name they give and the VRAM in use.
func rx6700xt(name string, usedMiB float64) nvsmi.GPU {
	return with(gpu(0, name, "0000:07:00.0"), func(g *nvsmi.GPU) {
		g.UtilGPU, g.UtilMem = n(0), n(0)
		g.MemUsedMiB, g.MemTotalMiB = n(usedMiB), n(12272)
		g.TempC, g.PowerW, g.PowerLimitW = n(47), n(6), n(211)
	})
}

func TestParseROCmSMICaptures(t *testing.T) {
	tests := []struct {
		capture string
		want    []nvsmi.GPU
	}{
		{"mi100x4__rocm-6.0.2", []nvsmi.GPU{
			mi100(0, "0x79ccd55167a2124a", "0000:83:00.0", 55, 36),
			mi100(1, "0x4edfb117a17a07d", "0000:a3:00.0", 58, 44),
			mi100(2, "0xd4a9ec48d03d261d", "0000:c3:00.0", 57, 43),
			mi100(3, "0x1b9dd972253c3736", "0000:e3:00.0", 53, 39),
		}},
		// ROCm 4.3 printed the vendor id as the card's series: no name.
		{"rx6700xt__rocm-4.3.0", []nvsmi.GPU{rx6700xt("", 1548)}},
		{"rx6700xt__rocm-5.7.1", []nvsmi.GPU{rx6700xt("AMD Radeon RX 6700/6700 XT / 6800M", 1492)}},
		// ROCm 6.1 renamed "GPU memory use (%)" to "GPU Memory Read/Write Activity (%)".
		{"rx6700xt__rocm-6.1.2", []nvsmi.GPU{rx6700xt("AMD Radeon RX 6700/6700 XT / 6800M", 1500)}},
		// gpustack asked for no bus id, no power cap.
		{"rx7800xt__rocm-6.2.4", []nvsmi.GPU{with(gpu(0, "AMD Radeon RX 7700 XT / 7800 XT", ""), func(g *nvsmi.GPU) {
			g.UUID = "0x5c88007d760374f3"
			g.UtilGPU, g.MemUsedMiB, g.MemTotalMiB = n(100), n(11077), n(16368)
			g.TempC, g.PowerW = n(51), n(53)
		})}},
		// A serial number, and the only fan reading at hand.
		{"mi50__vega20", []nvsmi.GPU{with(gpu(0, "AMD Radeon Instinct MI50 32GB", "0000:63:00.0"), func(g *nvsmi.GPU) {
			g.UUID = "0x2f048617326b1ea"
			g.UtilGPU, g.UtilMem, g.MemUsedMiB, g.MemTotalMiB = n(0), n(0), n(10), n(32752)
			g.TempC, g.PowerW, g.PowerLimitW, g.FanPct = n(38), n(26), n(225), n(0)
		})}},
		// --showallinfo: no memory, temperature or power at all.
		{"rx6600__showallinfo-jq", []nvsmi.GPU{with(gpu(0, "AMD Radeon RX 6600/6600 XT/6600M", "0000:0b:00.0"), func(g *nvsmi.GPU) {
			g.UtilGPU = n(0)
		})}},
	}
	for _, tt := range tests {
		t.Run(tt.capture, func(t *testing.T) {
			rep, err := ParseROCmSMI(captures.MustLoadAMD(captures.ROCmSMI, tt.capture).Out)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, rep.GPUs); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
			if len(rep.Notes) > 0 {
				t.Errorf("notes on a real capture: %q", rep.Notes)
			}
		})
	}
}

// Every ROCm capture is covered by the table above.
func TestROCmSMICapturesAllTested(t *testing.T) {
	if got := len(captures.AMDNames(captures.ROCmSMI)); got != 7 {
		t.Errorf("%d rocm-smi captures embedded, 7 in TestParseROCmSMICaptures: add the new ones", got)
	}
}

var (
	rx6600Static = captures.MustLoadAMD(captures.AMDSMI, "rx6600__list").Static
	rx6600Metric = captures.MustLoadAMD(captures.AMDSMI, "rx6600__list").Metric
	mi210Static  = captures.MustLoadAMD(captures.AMDSMI, "mi210__gpu-data").Static
)

// rx6600 is the RX 6600 of the amd-smi capture, both outputs read.
var rx6600 = with(gpu(0, "AMD Radeon RX 6600/6600 XT", "0000:0b:00.0"), func(g *nvsmi.GPU) {
	g.UtilGPU, g.UtilMem, g.MemUsedMiB, g.MemTotalMiB = n(1), n(0), n(202), n(8176)
	g.TempC, g.PowerW, g.PowerLimitW, g.FanPct = n(37), n(6), n(100), n(0)
	g.ECCUncorrected = n(0)
})

func TestParseAMDSMICaptures(t *testing.T) {
	staticOnly := with(gpu(0, "AMD Radeon RX 6600/6600 XT", "0000:0b:00.0"), func(g *nvsmi.GPU) {
		g.MemTotalMiB, g.PowerLimitW = n(8176), n(100)
	})
	metricOnly := with(rx6600, func(g *nvsmi.GPU) { g.Name, g.BusID, g.PowerLimitW = "", "", na })
	tests := []struct {
		name           string
		static, metric []byte
		want           []nvsmi.GPU
	}{
		{"rx6600 static and metric", rx6600Static, rx6600Metric, []nvsmi.GPU{rx6600}},
		{"rx6600 static only", rx6600Static, nil, []nvsmi.GPU{staticOnly}},
		{"rx6600 metric only", nil, rx6600Metric, []nvsmi.GPU{metricOnly}},
		// The board's serial is "0": no id. This capture has no bus id.
		{"mi210 static, gpu_data", mi210Static, nil, []nvsmi.GPU{with(gpu(0, "AMD Instinct MI210", ""), func(g *nvsmi.GPU) {
			g.MemTotalMiB, g.PowerLimitW = n(65520), n(300)
		})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := ParseAMDSMI(tt.static, tt.metric)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, rep.GPUs); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
			if len(rep.Notes) > 0 {
				t.Errorf("notes on a real capture: %q", rep.Notes)
			}
		})
	}
}
