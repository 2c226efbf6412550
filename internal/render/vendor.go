package render

import (
	"strings"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// vendorNames are the vendors of cluster.GPU.Vendor as people write them.
var vendorNames = map[string]string{loaddata.VendorNVIDIA: "NVIDIA", loaddata.VendorAMD: "AMD"}

// vendorName is how the page and -text name vendor: "NVIDIA", "AMD", or
// the vendor as load_data.csv has it (cluster bounds it).
func vendorName(vendor string) string {
	if n, ok := vendorNames[vendor]; ok {
		return n
	}
	return vendor
}

// isNVIDIA reports whether g is NVIDIA's; a GPU made without a vendor
// (cluster gives every GPU one) is, as every GPU was before AMD's.
func isNVIDIA(g *cluster.GPU) bool {
	return g.Vendor == "" || g.Vendor == loaddata.VendorNVIDIA
}

// withVendor is a GPU's full name with its vendor's name first where the
// name does not say it already: an older rocm-smi's "Arcturus GL-XL
// [Instinct MI100]" is "AMD Arcturus GL-XL [Instinct MI100]", "Tesla
// V100-SXM2-16GB" is "NVIDIA Tesla V100-SXM2-16GB", and "AMD Instinct
// MI300X" stays as it is.
func withVendor(name, vendor string) string {
	v := vendorName(vendor)
	if name == "" || v == "" || strings.Contains(strings.ToLower(name), strings.ToLower(v)) {
		return name
	}
	return v + " " + name
}

// hostVendor is the vendor of a host's GPUs of its model (ModelName); ""
// when it has none.
func hostVendor(h *cluster.Host) string {
	for _, g := range h.GPUs {
		if g.Name == h.ModelName {
			return g.Vendor
		}
	}
	return ""
}
