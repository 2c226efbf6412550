package pagetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/gpumon/gpumon/internal/testenv"
)

// One chromium serves the whole test binary; each test opens its own tab.
// It starts on first use, so `go test -run X` of a test without a browser
// starts none. A second one, started the same way, has accessibility on
// from the start, as when a screen reader runs (tabOptions.screenReader).

const defaultChromium = "/usr/bin/chromium"

// testTimeout bounds everything one test does in its tab.
const testTimeout = 60 * time.Second

type browserProc struct {
	once    sync.Once
	ctx     context.Context // holds the started browser
	cancel  func()
	dataDir string
	missing string // why there is no browser to start ("" when there is)
	err     error  // it is there but did not start
}

// browser serves the tests; reader is the one with accessibility on: a
// tab's accessibility tree, enabled only after the page loads, leaves what
// is off screen (content-visibility: auto) out as "not rendered", which a
// screen reader, on from the start, does not see.
var browser, reader browserProc

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range []*browserProc{&browser, &reader} {
		if b.cancel != nil {
			b.cancel()
		}
		if b.dataDir != "" {
			os.RemoveAll(b.dataDir)
		}
	}
	os.Exit(code)
}

func chromiumPath() string {
	if p := os.Getenv("GPUMON_CHROMIUM"); p != "" {
		return p
	}
	return defaultChromium
}

func startBrowser(browser *browserProc, screenReader bool) {
	path := chromiumPath()
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		browser.missing = fmt.Sprintf("chromium not found at %s", path)
		return
	}
	dir, err := os.MkdirTemp("", "gpumon-pagetest-profile-")
	if err != nil {
		browser.err = err
		return
	}
	browser.dataDir = dir
	out := &testenv.SyncBuffer{Max: 64 << 10} // for the error message of a failed start
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.UserDataDir(dir),
		chromedp.Headless,
		chromedp.NoSandbox, // root, and containers without user namespaces
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// This machine's network is closed: without these, chromium's own
		// connections (updates, sync, field trials) fail by the dozen.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter"),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("force-renderer-accessibility", screenReader),
		chromedp.CombinedOutput(out),
	)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	browser.cancel = func() { cancelCtx(); cancelAlloc() }
	startCtx, cancelStart := context.WithTimeout(ctx, 60*time.Second)
	defer cancelStart()
	// Start the browser under a context with no deadline (ctx), and only
	// bound the wait: the first Do ties the browser's life to its context.
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(ctx) }()
	select {
	case err = <-done:
	case <-startCtx.Done():
		err = errors.New("no answer within 60s")
	}
	if err != nil {
		browser.err = fmt.Errorf("starting %s: %v\nits output:\n%s", path, err, out.String())
		return
	}
	browser.ctx = ctx
}

// requireBrowser returns the shared browser's context, or skips (fails under
// CI, see testenv.Need) when chromium is not installed. A chromium that is
// installed but does not start always fails the test.
func requireBrowser(t *testing.T, screenReader bool) context.Context {
	t.Helper()
	browser := &browser
	if screenReader {
		browser = &reader
	}
	browser.once.Do(func() { startBrowser(browser, screenReader) })
	if browser.missing != "" {
		testenv.Need(t, browser.missing+" (apt-get install chromium; .ci/run does)")
	}
	if browser.err != nil {
		t.Fatal(browser.err)
	}
	return browser.ctx
}

// tab is one browser tab for one test, with what the page reported.
type tab struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string // console errors, exceptions, failed loads, dialogs
	messages []string // everything the console said, for failure messages
}

type tabOptions struct {
	noScript      bool   // Emulation.setScriptExecutionDisabled before loading
	xssDetector   bool   // replace alert, confirm and prompt before any page script
	colorScheme   string // prefers-color-scheme to emulate ("" = the default, light)
	width, height int64  // viewport; 0 = the window's 1280x900
	mobile        bool
	screenReader  bool // in the browser with accessibility on (reader)
	// timeout bounds the tab's work instead of testTimeout (axe-core on
	// a 1,000-host group page takes over a minute)
	timeout time.Duration
}

// xssDetector runs in every document before the page's own scripts. A
// payload that runs alert(1) (or confirm, prompt, print) marks the window
// instead of opening a dialog.
const xssDetector = `(() => {
	const hit = (name) => function (...args) {
		(window.__xss = window.__xss || []).push(name + "(" + args.map(String).join(",") + ")");
	};
	for (const name of ["alert", "confirm", "prompt", "print"]) {
		Object.defineProperty(window, name, {value: hit(name), writable: false, configurable: false});
	}
})();`

// newTab opens a tab in the shared browser, set up as o says, with a
// deadline of testTimeout. At the end of the test it closes, and what the
// console said is logged when the test failed.
func newTab(t *testing.T, o tabOptions) *tab {
	t.Helper()
	bctx := requireBrowser(t, o.screenReader)
	tb := &tab{t: t}
	timeout := testTimeout
	if o.timeout > 0 {
		timeout = o.timeout
	}
	parent, cancelTimeout := context.WithTimeout(bctx, timeout)
	ctx, cancelTab := chromedp.NewContext(parent, chromedp.WithListener(tb.listen))
	tb.ctx = ctx
	t.Cleanup(func() {
		cancelTab()
		cancelTimeout()
		if t.Failed() {
			tb.mu.Lock()
			if len(tb.messages) > 0 {
				t.Logf("the page's console:\n  %s", strings.Join(tb.messages, "\n  "))
			}
			tb.mu.Unlock()
		}
	})
	// The first Do opens the tab.
	setup := []chromedp.Action[chromedp.Void]{}
	if o.xssDetector {
		setup = append(setup, chromedp.Func(func(ctx context.Context, tt *chromedp.Target) error {
			_, err := cdp.Call(ctx, tt, page.AddScriptToEvaluateOnNewDocument,
				page.AddScriptToEvaluateOnNewDocumentParams{Source: xssDetector})
			return err
		}))
	}
	if o.noScript {
		setup = append(setup, chromedp.Func(func(ctx context.Context, tt *chromedp.Target) error {
			_, err := cdp.Call(ctx, tt, emulation.SetScriptExecutionDisabled,
				emulation.SetScriptExecutionDisabledParams{Value: true})
			return err
		}))
	}
	if o.colorScheme != "" {
		setup = append(setup, chromedp.Func(func(ctx context.Context, tt *chromedp.Target) error {
			_, err := cdp.Call(ctx, tt, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: o.colorScheme}},
			})
			return err
		}))
	}
	if o.width > 0 {
		var opts []chromedp.EmulateViewportOption
		if o.mobile {
			opts = append(opts, chromedp.EmulateMobile, chromedp.EmulateTouch)
		}
		setup = append(setup, chromedp.EmulateViewport(o.width, o.height, opts...))
	}
	if err := chromedp.Do(ctx, setup...); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	return tb
}

// listen runs in the tab's event loop: it must return fast and call nothing.
func (tb *tab) listen(ev any) {
	var problem, msg string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		var args []string
		for _, a := range ev.Args {
			if a.Value != nil {
				args = append(args, string(a.Value))
			} else {
				args = append(args, a.Description)
			}
		}
		msg = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " "))
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			problem = msg
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		msg = fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, text)
		problem = msg
	case *log.EventEntryAdded:
		e := ev.Entry
		msg = fmt.Sprintf("log %s %s: %s %s", e.Level, e.Source, e.Text, e.URL)
		if e.Level == log.EntryLevelError {
			problem = msg
		}
	case *network.EventLoadingFailed:
		msg = fmt.Sprintf("loading failed (%s): %s", ev.Type, ev.ErrorText)
		if ev.BlockedReason != "" {
			msg += " blocked: " + string(ev.BlockedReason)
		}
		problem = msg
	case *network.EventResponseReceived:
		if ev.Response.Status >= 400 {
			msg = fmt.Sprintf("HTTP %d for %s", ev.Response.Status, ev.Response.URL)
			problem = msg
		}
	case *network.EventRequestWillBeSent:
		// The page is self-contained apart from its own files: anything
		// leaving 127.0.0.1 (a font, a CDN script, a tracker) is a problem,
		// and on CI's closed network a failure.
		u := ev.Request.URL
		if !strings.HasPrefix(u, "http://127.0.0.1:") && !strings.HasPrefix(u, "data:") && !strings.HasPrefix(u, "about:") {
			msg = "request outside the test server: " + u
			problem = msg
		}
	case *page.EventJavascriptDialogOpening:
		msg = fmt.Sprintf("a %s dialog opened: %q", ev.Type, ev.Message)
		problem = msg
		// Close it, or the page stays blocked; no command may run in here.
		go chromedp.Call(tb.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
	}
	if msg == "" {
		return
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.messages = append(tb.messages, msg)
	if problem != "" {
		tb.problems = append(tb.problems, problem)
	}
}

// load navigates and waits until the page's load event has fired and its
// document is complete.
func (tb *tab) load(url string) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, chromedp.Navigate(url)); err != nil {
		tb.t.Fatalf("loading %s: %v", url, err)
	}
	tb.waitJS(`document.readyState === "complete"`, "the page to finish loading")
}

// noProblems fails the test for every console error, exception, failed or
// outside request and dialog seen so far. To catch messages that arrive
// just after load, it first round-trips a trivial evaluation, which the
// browser answers after the events it already sent.
func (tb *tab) noProblems(when string) {
	tb.t.Helper()
	for _, p := range tb.takeProblems() {
		tb.t.Errorf("%s: %s", when, p)
	}
}

// takeProblems returns the problems seen so far and forgets them.
func (tb *tab) takeProblems() []string {
	_ = chromedp.Do(tb.ctx, chromedp.Evaluate[chromedp.Void](`0`))
	tb.mu.Lock()
	defer tb.mu.Unlock()
	p := tb.problems
	tb.problems = nil
	return p
}

// eval evaluates a JavaScript expression and decodes its value into T.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("evaluating %s: %v", short(expr), err)
	}
	return v
}

// waitJS waits (polling on animation frames, up to 10 s) until the
// expression is truthy.
func (tb *tab) waitJS(expr, what string) {
	tb.t.Helper()
	err := chromedp.Do(tb.ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		tb.t.Fatalf("waiting for %s (%s): %v", what, short(expr), err)
	}
}

func short(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// jsString quotes s as a JavaScript string literal (JSON is a subset).
func jsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// box is an element's place in the viewport, in CSS pixels.
type box struct {
	X, Y, W, H float64
	Found      bool
}

// scrollTo scrolls the element that matches sel into the middle of the
// viewport and returns its box.
func (tb *tab) scrollTo(sel string) box {
	tb.t.Helper()
	return tb.scrollToAt(sel, "center")
}

// scrollToAt scrolls the element that matches sel into the viewport, its
// top at the top ("start"), its bottom at the bottom ("end") or in the
// middle ("center"), as far as the page can scroll, and returns its box.
func (tb *tab) scrollToAt(sel, block string) box {
	tb.t.Helper()
	b := eval[box](tb, fmt.Sprintf(`(() => {
		const e = document.querySelector(%s);
		if (!e) return {Found: false};
		e.scrollIntoView({block: %s, inline: "nearest"});
		const r = e.getBoundingClientRect();
		return {X: r.x, Y: r.y, W: r.width, H: r.height, Found: true};
	})()`, jsString(sel), jsString(block)))
	if !b.Found {
		tb.t.Fatalf("no element matches %s", sel)
	}
	if b.W <= 0 || b.H <= 0 {
		tb.t.Fatalf("%s has no size (%gx%g)", sel, b.W, b.H)
	}
	return b
}

// hover moves the mouse away from everything, then onto the centre of the
// element that matches sel, as a person's pointer would.
func (tb *tab) hover(sel string) {
	tb.t.Helper()
	tb.hoverAt(sel, "center")
}

// hoverAt is hover with the element scrolled to block (see scrollToAt):
// "end" puts it at the bottom of the window.
func (tb *tab) hoverAt(sel, block string) {
	tb.t.Helper()
	tb.unhover()
	b := tb.scrollToAt(sel, block)
	x, y := b.X+b.W/2, b.Y+b.H/2
	// The centre must be the element itself (or inside it), not something
	// drawn over it.
	on := eval[bool](tb, fmt.Sprintf(`(() => {
		const e = document.querySelector(%s), at = document.elementFromPoint(%g, %g);
		return !!at && (e === at || e.contains(at));
	})()`, jsString(sel), x, y))
	if !on {
		tb.t.Fatalf("the centre of %s (%g, %g) is covered by another element", sel, x, y)
	}
	if err := chromedp.Do(tb.ctx, chromedp.MouseEvent(chromedp.MouseMoved, x, y)); err != nil {
		tb.t.Fatalf("moving the mouse onto %s: %v", sel, err)
	}
	tb.waitJS(fmt.Sprintf(`document.querySelector(%s).matches(":hover")`, jsString(sel)), sel+" to be hovered")
}

// unhover moves the mouse to the top left corner of the viewport.
func (tb *tab) unhover() {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, chromedp.MouseEvent(chromedp.MouseMoved, 0, 0)); err != nil {
		tb.t.Fatalf("moving the mouse away: %v", err)
	}
}

// tabTo presses Tab until the element that matches sel has the focus, as a
// keyboard user would reach it, and fails after max presses.
func (tb *tab) tabTo(sel string, max int) {
	tb.t.Helper()
	match := fmt.Sprintf(`document.activeElement && document.activeElement.matches(%s)`, jsString(sel))
	for i := 0; i < max; i++ {
		if eval[bool](tb, match) {
			return
		}
		if err := chromedp.Do(tb.ctx, chromedp.KeyEvent(kb.Tab)); err != nil {
			tb.t.Fatalf("pressing Tab: %v", err)
		}
	}
	if !eval[bool](tb, match) {
		tb.t.Fatalf("%d presses of Tab did not reach %s (focus is on %s)", max, sel,
			eval[string](tb, `document.activeElement ? document.activeElement.outerHTML.slice(0, 200) : "nothing"`))
	}
}

// visibleJS is a JavaScript function: is element e shown (laid out, not
// hidden, not transparent, not clipped to nothing)?
const visibleJS = `(e) => {
	if (!e) return false;
	const s = getComputedStyle(e), r = e.getBoundingClientRect();
	if (s.display === "none" || s.visibility !== "visible" || parseFloat(s.opacity) < 0.5) return false;
	if (r.width < 2 || r.height < 2) return false;
	for (let a = e; a; a = a.parentElement) {
		const as = getComputedStyle(a);
		if (a !== e && (as.display === "none" || parseFloat(as.opacity) < 0.5)) return false;
	}
	return true;
}`

// isVisible reports whether the element that matches sel is shown.
func (tb *tab) isVisible(sel string) bool {
	tb.t.Helper()
	return eval[bool](tb, fmt.Sprintf(`(%s)(document.querySelector(%s))`, visibleJS, jsString(sel)))
}

// waitVisible waits until the element that matches sel is shown.
func (tb *tab) waitVisible(sel string) {
	tb.t.Helper()
	tb.waitJS(fmt.Sprintf(`(%s)(document.querySelector(%s))`, visibleJS, jsString(sel)), sel+" to be shown")
}

// waitHidden waits until the element that matches sel is not shown.
func (tb *tab) waitHidden(sel string) {
	tb.t.Helper()
	tb.waitJS(fmt.Sprintf(`!(%s)(document.querySelector(%s))`, visibleJS, jsString(sel)), sel+" to be hidden")
}

// rgba is a colour as the browser paints it.
type rgba struct{ R, G, B, A float64 }

func (c rgba) String() string { return fmt.Sprintf("rgba(%g, %g, %g, %g)", c.R, c.G, c.B, c.A) }

// distance is how far apart two opaque colours are (0 to 441).
func (c rgba) distance(d rgba) float64 {
	dr, dg, db := c.R-d.R, c.G-d.G, c.B-d.B
	return math.Sqrt(dr*dr + dg*dg + db*db)
}

// greyish reports whether the colour is close to a grey: its channels are
// within 48 of each other.
func (c rgba) greyish() bool {
	return max(c.R, c.G, c.B)-min(c.R, c.G, c.B) <= 48
}

// toRGBAJS is a JavaScript function that turns any CSS colour (rgb(),
// oklch(), color-mix()...) into the sRGB bytes a canvas paints for it.
const toRGBAJS = `(css) => {
	const c = document.createElement("canvas");
	c.width = c.height = 1;
	const g = c.getContext("2d", {willReadFrequently: true});
	g.clearRect(0, 0, 1, 1);
	g.fillStyle = "#000";
	g.fillStyle = css;
	g.fillRect(0, 0, 1, 1);
	const d = g.getImageData(0, 0, 1, 1).data;
	return {R: d[0], G: d[1], B: d[2], A: d[3] / 255};
}`

// background returns the computed background colour of the element that
// matches sel, and its background-image (a gradient, say; "none" if none).
func (tb *tab) background(sel string) (rgba, string) {
	tb.t.Helper()
	var v struct {
		Color rgba
		Image string
		Found bool
	}
	v = eval[struct {
		Color rgba
		Image string
		Found bool
	}](tb, fmt.Sprintf(`(() => {
		const e = document.querySelector(%s);
		if (!e) return {Found: false};
		const s = getComputedStyle(e);
		return {Color: (%s)(s.backgroundColor), Image: s.backgroundImage, Found: true};
	})()`, jsString(sel), toRGBAJS))
	if !v.Found {
		tb.t.Fatalf("no element matches %s", sel)
	}
	return v.Color, v.Image
}

// pageBackground is the colour behind the page's content: the body's
// background, else the root element's, else the canvas (white, or the
// dark canvas when color-scheme is dark).
func (tb *tab) pageBackground() rgba {
	tb.t.Helper()
	return eval[rgba](tb, fmt.Sprintf(`(() => {
		const conv = %s;
		for (const e of [document.body, document.documentElement]) {
			const c = conv(getComputedStyle(e).backgroundColor);
			if (c.A > 0) return c;
		}
		return conv(getComputedStyle(document.documentElement).colorScheme.includes("dark") &&
			matchMedia("(prefers-color-scheme: dark)").matches ? "Canvas" : "#fff");
	})()`, toRGBAJS))
}

// screenshot saves a PNG of the page (full: the whole page, else the
// viewport) as an artifact and returns its path.
func (tb *tab) screenshot(name string, full bool) string {
	tb.t.Helper()
	var png []byte
	var err error
	if full {
		png, err = chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	} else {
		png, err = chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
	}
	if err != nil {
		tb.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifactsDir(tb.t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatalf("saving the screenshot: %v", err)
	}
	tb.t.Logf("screenshot: %s", path)
	return path
}

// artifactsDir is $GPUMON_ARTIFACTS, else artifacts/ at the top of the
// repository (two levels above this package), made if missing.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUMON_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "artifacts")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		t.Fatalf("artifacts folder: %v", err)
	}
	return abs
}

// serve serves dir on 127.0.0.1 for the rest of the test and returns the
// address of its index.html (as "/": http.FileServer redirects
// /index.html there).
func serve(t *testing.T, dir string) string {
	t.Helper()
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}
