// Package pagetest holds the real-browser tests of the status page that
// render writes: Debian's chromium, driven from Go with chromedp, loads the
// page from a local HTTP server and checks what a person would see (colours,
// hover and focus details, the phone layout, dark mode, the page without
// JavaScript) and that text from load_data.csv can run nothing in it.
//
// The package has no code outside its tests. Without /usr/bin/chromium
// (GPUMON_CHROMIUM names another) the tests skip, except under CI=true,
// where they fail. Screenshots are kept in $GPUMON_ARTIFACTS, else in
// artifacts/ at the top of the repository.
package pagetest
