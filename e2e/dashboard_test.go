package e2e

// The dashboard in a real browser: a local cluster of the real binary,
// Debian's chromium driven headless over the DevTools protocol (chromedp).
// Skips when chromium is absent (.ci/run installs it).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gossiptrain/gossiptrain/data"
)

// chromiumPath finds Debian's chromium, or skips the test.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (Debian: apt-get install chromium): the dashboard's browser test needs it")
	return ""
}

// browser starts a headless chromium with the flags this machine's closed
// network needs (no background connections) and a fresh profile.
func browser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	return bctx
}

var dashboardURLRe = regexp.MustCompile(`dashboard: watch the run live in a browser.*url=(http://[0-9.:]+/)`)

// The check: with a 3-peer cluster training, the page lists the 3
// members and its loss chart gains points while training runs; the
// screenshot is kept as the test's artifact (go test -artifacts), and
// copied to $GOSSIPTRAIN_DASHBOARD_FIGURE when set (the README's figure:
// GOSSIPTRAIN_DASHBOARD_PEERS=4 GOSSIPTRAIN_DASHBOARD_FIGURE=$PWD/docs/figures/dashboard.png
// go test -run TestDashboardInBrowser .).
func TestDashboardInBrowser(t *testing.T) {
	chromiumPath(t)
	bin := binary(t)
	peers := 3
	if s := os.Getenv("GOSSIPTRAIN_DASHBOARD_PEERS"); s != "" {
		peers, _ = strconv.Atoi(s)
	}
	gen := data.DefaultGenConfig()
	gen.Rows, gen.TestRows, gen.Features, gen.Fields, gen.Parts, gen.Seed = 60000, 4000, 1<<16, 20, peers, 5
	meta, err := data.Generate(t.TempDir(), gen, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(bin, "cluster", "--peers", strconv.Itoa(peers), "--dir", run,
		"--train", filepath.Join(filepath.Dir(meta.Files[0]), "train-*.svm"), "--test", meta.TestFile, "--dim", "65536",
		"--epochs", "200", "--eval-every", "4000", "--progress-every", "1s")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	})
	urls := make(chan string, 1)
	var logTail tailBuffer
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			logTail.add(sc.Text())
			if m := dashboardURLRe.FindStringSubmatch(sc.Text()); m != nil && !sent {
				urls <- m[1]
				sent = true
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(2 * time.Minute):
		t.Fatalf("cluster logged no dashboard URL within 2 minutes:\n%s", logTail.String())
	}
	t.Logf("dashboard at %s", url)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bctx := browser(t, ctx)
	points := func() int {
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`Number(document.getElementById("chart-loss").dataset.points)`))
		if err != nil {
			t.Fatalf("reading the loss chart: %v", err)
		}
		return n
	}
	members := fmt.Sprintf(`document.querySelectorAll("#members tbody tr.member").length === %d`, peers)
	if err := chromedp.Do(bctx,
		chromedp.Navigate(url),
		chromedp.Poll[chromedp.Void](members, chromedp.WithPollingTimeout(90*time.Second)),
	); err != nil {
		t.Fatalf("the page did not list %d members: %v\n%s", peers, err, logTail.String())
	}
	first := points()
	want := max(first+1, 6)
	if err := chromedp.Do(bctx, chromedp.Poll[chromedp.Void](fmt.Sprintf(`Number(document.getElementById("chart-loss").dataset.points) >= %d`, want),
		chromedp.WithPollingTimeout(90*time.Second))); err != nil {
		t.Fatalf("the loss chart stayed at %d points (want %d): %v\n%s", points(), want, err, logTail.String())
	}
	// Training was still running when the chart grew: members train.
	training, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#members tbody tr.member td.state-training").length`))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#members tbody tr")].map(r => r.innerText.replace(/\s+/g, " "))`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loss chart: %d points, then %d; members:\n%s", first, points(), strings.Join(rows, "\n"))
	if training == 0 {
		t.Errorf("no member shows as training on the page")
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // the whole page, as PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(t.ArtifactDir(), "dashboard.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if fig := os.Getenv("GOSSIPTRAIN_DASHBOARD_FIGURE"); fig != "" {
		if err := os.WriteFile(fig, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tailBuffer keeps the last lines of a log for error messages.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *tailBuffer) add(l string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.lines) == 40 {
		b.lines = b.lines[1:]
	}
	b.lines = append(b.lines, l)
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}
