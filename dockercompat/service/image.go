package service

import (
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slopbox/slopbox/image"
)

// ImageInspect is docker image inspect's object (the Engine API's GET
// /images/{name}/json), which the slopbox CLI prints too.
type ImageInspect struct {
	ID              string `json:"Id"`
	RepoTags        []string
	RepoDigests     []string
	Parent          string
	Comment         string
	Created         string
	Container       string
	ContainerConfig *imageConfig
	DockerVersion   string
	Author          string
	Config          *imageConfig
	Architecture    string
	Variant         string `json:",omitempty"`
	Os              string
	Size            int64
	VirtualSize     int64
	GraphDriver     struct {
		Name string
		Data map[string]string
	}
	RootFS v1.RootFS
	// Descriptor is the image's manifest, as dockerd's containerd image
	// store (API 1.48) shows it.
	Descriptor struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int64  `json:"size"`
	}
}

// imageConfig is an image's config as Docker shows it: OnBuild always
// there, null when empty (docker-py's test_build_container_with_target
// reads it).
type imageConfig struct {
	v1.Config
	OnBuild []string
}

// ImageInspectOf is d in Docker's shape: names as Docker prints them, a
// RepoDigest for each repository a name was pulled from (REPO@digest at
// the registry; none for an image built, committed, imported or loaded
// here, as dockerd's), and a commit's container config or, for any other
// image, its own config as ContainerConfig.
func ImageInspectOf(d *image.Details) ImageInspect {
	cfg := &imageConfig{Config: d.Config, OnBuild: d.Config.OnBuild}
	out := ImageInspect{
		ID: d.ID, RepoTags: []string{}, RepoDigests: []string{}, Parent: d.Parent, Created: d.Created.Format(time.RFC3339Nano),
		Container: d.Container, Author: d.Author, Config: cfg, ContainerConfig: cfg,
		Architecture: d.Architecture, Variant: d.Variant, Os: d.OS, Size: d.Size, VirtualSize: d.Size, RootFS: d.RootFS,
	}
	if d.Container != "" && d.ContainerConfig != nil {
		out.ContainerConfig = &imageConfig{Config: *d.ContainerConfig, OnBuild: d.ContainerConfig.OnBuild}
	}
	out.GraphDriver.Name, out.GraphDriver.Data = "overlay", map[string]string{}
	out.Descriptor.MediaType, out.Descriptor.Digest, out.Descriptor.Size = d.MediaType, d.Digest, d.ManifestSize
	for _, n := range d.Names {
		name := image.DockerName(n)
		out.RepoTags = append(out.RepoTags, name)
		if src, ok := d.Sources[n]; ok {
			if rd := Repository(name) + "@" + src; !slices.Contains(out.RepoDigests, rd) {
				out.RepoDigests = append(out.RepoDigests, rd)
			}
		}
	}
	return out
}

// Repository is a name's repository: without its tag or digest
// (localhost:5000/a/b:v1 is localhost:5000/a/b).
func Repository(name string) string {
	if j := strings.LastIndexAny(name, ":@"); j > strings.LastIndex(name, "/") {
		return name[:j]
	}
	return name
}
