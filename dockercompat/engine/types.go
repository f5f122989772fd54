package engine

import (
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/jsonstream"

	"github.com/slopbox/slopbox/dockercompat/service"
)

// The responses here are moby's API types (github.com/moby/moby/api,
// pinned) where one has the shape API 1.24 to 1.44 clients read. Those
// below are the project's own, each for what moby's newer types dropped
// or would add that such clients trip over.

// streamMessage is one line of a pull, push, build, import or load
// stream: moby's jsonstream.Message with the top-level "error" string
// that docker-py and docker-compose 1.29 read (moby's types dropped it).
type streamMessage struct {
	Stream      string               `json:"stream,omitempty"`
	Status      string               `json:"status,omitempty"`
	Progress    *jsonstream.Progress `json:"progressDetail,omitempty"`
	ID          string               `json:"id,omitempty"`
	ErrorDetail *jsonstream.Error    `json:"errorDetail,omitempty"`
	Error       string               `json:"error,omitempty"`
	Aux         any                  `json:"aux,omitempty"`
}

// errorMessage is the stream line of a failure, with its code when the
// failure has one (a build step's exit code).
func errorMessage(msg string, code int) streamMessage {
	return streamMessage{ErrorDetail: &jsonstream.Error{Message: msg, Code: code}, Error: msg}
}

// imageSummary is an entry of GET /images/json: moby's image.Summary
// with VirtualSize, which clients of API 1.43 and before read.
type imageSummary struct {
	ID          string            `json:"Id"`
	ParentID    string            `json:"ParentId"`
	RepoTags    []string          `json:"RepoTags"`
	RepoDigests []string          `json:"RepoDigests"`
	Created     int64             `json:"Created"`
	Size        int64             `json:"Size"`
	SharedSize  int64             `json:"SharedSize"`
	VirtualSize int64             `json:"VirtualSize"`
	Labels      map[string]string `json:"Labels"`
	Containers  int64             `json:"Containers"`
}

// containerSummary is an entry of GET /containers/json: moby's
// container.Summary without its netip addresses (an unpublished port has
// no IP, and moby's would send "") and with the networks as the service
// shows them in inspect.
type containerSummary struct {
	ID              string            `json:"Id"`
	Names           []string          `json:"Names"`
	Image           string            `json:"Image"`
	ImageID         string            `json:"ImageID"`
	Command         string            `json:"Command"`
	Created         int64             `json:"Created"`
	Ports           []portSummary     `json:"Ports"`
	Labels          map[string]string `json:"Labels"`
	State           string            `json:"State"`
	Status          string            `json:"Status"`
	HostConfig      struct{ NetworkMode string }
	NetworkSettings struct {
		Networks map[string]*service.EndpointSettings
	}
	Mounts []struct{} `json:"Mounts"`
}

// portSummary is a published port of a container in the list.
type portSummary struct {
	IP          string `json:"IP"`
	PrivatePort int    `json:"PrivatePort"`
	PublicPort  int    `json:"PublicPort"`
	Type        string `json:"Type"`
}

// statsResponse is GET /containers/{id}/stats: moby's
// container.StatsResponse keeps networks and blkio_stats out when empty,
// and docker-py's stats test wants both keys.
type statsResponse struct {
	Read        string              `json:"read"`
	PreRead     string              `json:"preread"`
	ID          string              `json:"id"`
	Name        string              `json:"name"`
	PidsStats   pidsStats           `json:"pids_stats"`
	MemoryStats memoryStats         `json:"memory_stats"`
	CPUStats    cpuStats            `json:"cpu_stats"`
	PreCPUStats cpuStats            `json:"precpu_stats"`
	BlkioStats  struct{}            `json:"blkio_stats"`
	Networks    map[string]struct{} `json:"networks"`
}

type pidsStats struct {
	Current uint64 `json:"current"`
}

type memoryStats struct {
	Usage uint64            `json:"usage"`
	Limit uint64            `json:"limit"`
	Stats map[string]uint64 `json:"stats"`
}

type cpuStats struct {
	CPUUsage struct {
		TotalUsage uint64 `json:"total_usage"`
	} `json:"cpu_usage"`
	SystemUsage    uint64 `json:"system_cpu_usage"`
	OnlineCPUs     uint32 `json:"online_cpus"`
	ThrottlingData struct {
		Periods          uint64 `json:"periods"`
		ThrottledPeriods uint64 `json:"throttled_periods"`
		ThrottledTime    uint64 `json:"throttled_time"`
	} `json:"throttling_data"`
}

// pushResult is the aux of a push stream's last line: the docker CLI's
// own type (cli/command/image), which moby's API types do not carry.
type pushResult struct {
	Tag, Digest string
	Size        int `json:",omitempty"`
}

// eventMessage is a line of GET /events: moby's events.Message with the
// legacy status, id and from that docker-py's events tests and older
// clients still read (moby's types dropped them).
type eventMessage struct {
	events.Message
	Status string `json:"status,omitempty"`
	ID     string `json:"id,omitempty"`
	From   string `json:"from,omitempty"`
}

// infoResponse is GET /info: the fields of moby's system.Info that
// slopbox has values for (moby's whole struct would claim zero values
// for plugins, registries and swarm it has none of).
type infoResponse struct {
	ID                string
	Containers        int
	ContainersRunning int
	ContainersPaused  int
	ContainersStopped int
	Images            int
	Driver            string
	DockerRootDir     string
	OperatingSystem   string
	OSType            string
	Architecture      string
	KernelVersion     string
	NCPU              int
	MemTotal          int64
	Name              string
	ServerVersion     string
	Runtimes          map[string]infoRuntime
	DefaultRuntime    string
	SecurityOptions   []string
	LoggingDriver     string
	CgroupDriver      string
	Swarm             struct{ LocalNodeState string }
	Labels            []string
	ExperimentalBuild bool
	Debug             bool
}

// infoRuntime is a runtime /info lists.
type infoRuntime struct {
	Path string `json:"path"`
}
