package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// fetch is `computerd fetch [-direct] [-timeout D] URL`: a small HTTP GET for
// images without curl (the test image's busybox wget is unreliable). It
// goes through HTTP_PROXY / HTTPS_PROXY unless -direct is given, prints the
// status line and the body, and exits 0 for a 2xx answer, 1 for any other
// answer and 2 when no answer came.
func fetch(args []string) int {
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	direct := fs.Bool("direct", false, "ignore the proxy settings")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: computerd fetch [-direct] [-timeout D] URL")
		return 2
	}
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
	if *direct {
		tr.Proxy = nil
	}
	c := &http.Client{Transport: tr, Timeout: *timeout}
	resp, err := c.Get(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		return 2
	}
	defer resp.Body.Close()
	fmt.Println(resp.Proto, resp.Status)
	if v := resp.Header.Get("X-Berth-Egress-Refused"); v != "" {
		fmt.Println("X-Berth-Egress-Refused:", v)
	}
	io.Copy(os.Stdout, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return 1
	}
	return 0
}
