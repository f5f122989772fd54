package sandbox

import (
	"bytes"
	"os"
	"path"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/oci"
	"github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// etcDir, in a sandbox's directory, holds its /etc/hosts, /etc/hostname
// and /etc/resolv.conf, bind-mounted over the image's.
const etcDir = "etc"

// etcFiles writes the sandbox's name resolution files (oci.EtcHosts,
// EtcHostname, ResolvConf, from the host's own files) and returns their
// mounts, but for a path a mount of the caller's already covers. Container
// root may edit them, as in Docker; a restart writes them afresh. They are
// files on the host's disk: with a read-only root filesystem (as Docker
// does) or a size-bounded one they are mounted read-only, so that every
// byte such a sandbox writes is under the bound it was given.
func (b *Backend) etcFiles(rec *record, hostname string) ([]spawnd.Mount, error) {
	dir := filepath.Join(b.state.sandboxDir(rec.ID), etcDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	hostHosts, _ := os.ReadFile("/etc/hosts")
	var extra []oci.HostEntry
	for _, h := range rec.ExtraHosts {
		e, err := oci.ParseHostEntry(h)
		if err != nil {
			return nil, err
		}
		if e.Gateway {
			e.IP = hostGateway(rec)
		}
		extra = append(extra, e)
	}
	ownIP, _ := bridgeAddrs(rec)
	files := []struct {
		name string
		data []byte
	}{
		{"hosts", oci.EtcHosts(hostHosts, rec.Network, hostname, ownIP, extra)},
		{"hostname", oci.EtcHostname(hostname)},
		{"resolv.conf", resolvConf(rec)},
	}
	var out []spawnd.Mount
	for _, f := range files {
		dst := "/etc/" + f.name
		if coveredBy(rec.Mounts, dst) {
			continue
		}
		p := filepath.Join(dir, f.name)
		if err := atomicfile.WriteVolatile(p, bytes.NewReader(f.data), 0o644); err != nil {
			return nil, err
		}
		if err := b.chownToNamespaceRoot(p); err != nil {
			return nil, err
		}
		out = append(out, spawnd.Mount{Source: p, Destination: dst, ReadOnly: rec.ReadOnly || rec.Limits.RootfsBytes > 0})
	}
	return out, nil
}

// resolvConf is the sandbox's /etc/resolv.conf for its networks now (the
// host's, as oci.ResolvConf adapts it).
func resolvConf(rec *record) []byte {
	hostResolv, _ := os.ReadFile("/etc/resolv.conf")
	var dns oci.DNS
	if rec.DNS != nil {
		dns = *rec.DNS
	}
	_, gateway := bridgeAddrs(rec)
	return oci.ResolvConf(hostResolv, rec.Network, gateway, dns)
}

// coveredBy reports whether a mount's destination is dst or one of its
// parents.
func coveredBy(ms []specs.Mount, dst string) bool {
	for _, m := range ms {
		d := path.Clean(m.Destination)
		if d == dst || d == "/" || (len(dst) > len(d) && dst[:len(d)+1] == d+"/") {
			return true
		}
	}
	return false
}
