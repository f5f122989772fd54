// Command lookupbench times name lookups inside a container (make bench,
// bench/network.sh): a name the network's DNS server answers (a compose
// service name) beside one /etc/hosts answers (localhost), the way a
// program meets them, and the DNS round trip alone. It is built static
// (netgo: Go's own resolver, which reads /etc/hosts and then asks the
// nameservers of /etc/resolv.conf, as a libc's does) and bind-mounted into
// the container, so every runtime is timed with the same client.
//
//	lookupbench -n 300 SERVICE localhost
//
// prints one JSON object:
//   - process_dns_ms, process_hosts_ms: the median wall time of a new
//     process that resolves the name and exits (getent hosts's shape: a
//     program starts, resolves, connects), the two names interleaved;
//   - dns_rtt_ms: the median of in-process lookups of the service name
//     (Go's resolver keeps no cache: each is a query and its answer);
//   - hosts_inprocess_ms: the same for the /etc/hosts name (a read of a
//     file the resolver caches for 5 s: the floor, reported).
//
// With -once NAME it resolves NAME, prints nothing and exits 0 (1 when the
// name does not resolve): the child of the process figures.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"time"
)

func main() {
	once := flag.String("once", "", "resolve this name and exit")
	n := flag.Int("n", 300, "lookups per figure")
	flag.Parse()
	r := &net.Resolver{PreferGo: true}
	if *once != "" {
		if _, err := r.LookupHost(context.Background(), *once); err != nil {
			os.Exit(1)
		}
		return
	}
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: lookupbench [-n N] DNS_NAME HOSTS_NAME")
		os.Exit(2)
	}
	dnsName, hostsName := flag.Arg(0), flag.Arg(1)
	for _, name := range []string{dnsName, hostsName} {
		if _, err := r.LookupHost(context.Background(), name); err != nil {
			fmt.Fprintf(os.Stderr, "lookupbench: %s does not resolve: %v\n", name, err)
			os.Exit(1)
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lookupbench:", err)
		os.Exit(1)
	}
	child := func(name string) float64 {
		t0 := time.Now()
		if err := exec.Command(self, "-once", name).Run(); err != nil {
			fmt.Fprintf(os.Stderr, "lookupbench: -once %s: %v\n", name, err)
			os.Exit(1)
		}
		return ms(time.Since(t0))
	}
	inProcess := func(name string) float64 {
		t0 := time.Now()
		if _, err := r.LookupHost(context.Background(), name); err != nil {
			fmt.Fprintf(os.Stderr, "lookupbench: %s: %v\n", name, err)
			os.Exit(1)
		}
		return ms(time.Since(t0))
	}
	var pd, ph, id, ih []float64
	for i := 0; i < *n+5; i++ {
		a, b := child(dnsName), child(hostsName)
		c, d := inProcess(dnsName), inProcess(hostsName)
		if i >= 5 { // warm-up
			pd, ph, id, ih = append(pd, a), append(ph, b), append(id, c), append(ih, d)
		}
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"runs":               *n,
		"process_dns_ms":     median(pd),
		"process_hosts_ms":   median(ph),
		"dns_rtt_ms":         median(id),
		"hosts_inprocess_ms": median(ih),
	})
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func median(v []float64) float64 {
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
