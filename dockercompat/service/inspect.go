package service

import (
	"encoding/json"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/moby/api/types/container"

	"github.com/slopbox/slopbox/dockercompat"
)

// ContainerInspect is docker inspect of a container (GET
// /containers/{id}/json): the key set of dockerd's for API 1.44, as
// docker-py, compose and the docker CLI read it. It is the project's own
// rather than moby's container.InspectResponse, whose newer API types
// give addresses as netip values (an address a sandbox has not got would
// be "" where dockerd sends none) and whose HostConfig carries fields
// clients of API 1.44 do not have.
type ContainerInspect struct {
	ID              string `json:"Id"`
	Created         string
	Path            string
	Args            []string
	State           *ContainerState
	Image           string
	Name            string
	RestartCount    int
	Driver          string
	Platform        string
	LogPath         string
	MountLabel      string
	ProcessLabel    string
	AppArmorProfile string
	ExecIDs         []string
	HostConfig      *HostConfig
	Config          *ContainerConfig
	NetworkSettings *NetworkSettings
	Mounts          []container.MountPoint
}

// ContainerState is inspect's State; Health is what serve's healthcheck
// recorded (omitted without a healthcheck, or before its first run).
type ContainerState struct {
	Status     string
	Running    bool
	Paused     bool
	Restarting bool
	OOMKilled  bool
	Dead       bool
	Pid        int
	ExitCode   int
	Error      string
	StartedAt  string
	FinishedAt string
	Health     json.RawMessage `json:",omitempty"`
}

// ContainerConfig is inspect's Config; the settings after Labels appear
// only when the create gave them, as dockerd's.
type ContainerConfig struct {
	Hostname     string
	User         string
	Env          []string
	Cmd          []string
	Image        string
	WorkingDir   string
	Entrypoint   []string // null when there is none
	Labels       map[string]string
	Tty          bool
	OpenStdin    bool
	AttachStdin  bool
	AttachStdout bool
	AttachStderr bool
	Healthcheck  *v1.HealthConfig `json:",omitempty"`
	MacAddress   string           `json:",omitempty"`
	StopTimeout  *int             `json:",omitempty"`
	StopSignal   string           `json:",omitempty"`
}

// HostConfig is inspect's HostConfig: Docker's whole key set, each with
// what the create asked for or what the sandbox has, and dockerd's
// default for what slopbox has no setting of (null lists as dockerd's).
type HostConfig struct {
	Binds                []string
	ContainerIDFile      string
	LogConfig            dockercompat.LogConfig
	NetworkMode          string
	PortBindings         PortMap
	RestartPolicy        dockercompat.RestartPolicy
	AutoRemove           bool
	VolumeDriver         string
	VolumesFrom          []string
	CapAdd               []string
	CapDrop              []string
	CgroupnsMode         string
	Dns                  []string
	DnsOptions           []string
	DnsSearch            []string
	ExtraHosts           []string
	GroupAdd             []string
	IpcMode              string
	Cgroup               string
	Links                []string
	OomScoreAdj          int
	PidMode              string
	Privileged           bool
	PublishAllPorts      bool
	ReadonlyRootfs       bool
	SecurityOpt          []string
	UTSMode              string
	UsernsMode           string
	ShmSize              int64
	Runtime              string
	ConsoleSize          [2]int
	Isolation            string
	CpuShares            int64
	Memory               int64
	NanoCpus             int64
	CgroupParent         string
	BlkioWeight          int
	BlkioWeightDevice    []struct{}
	BlkioDeviceReadBps   []struct{}
	BlkioDeviceWriteBps  []struct{}
	BlkioDeviceReadIOps  []struct{}
	BlkioDeviceWriteIOps []struct{}
	CpuPeriod            int64
	CpuQuota             int64
	CpuRealtimePeriod    int64
	CpuRealtimeRuntime   int64
	CpusetCpus           string
	CpusetMems           string
	Devices              []struct{}
	DeviceCgroupRules    []string
	DeviceRequests       []struct{}
	KernelMemory         int64
	KernelMemoryTCP      int64
	MemoryReservation    int64
	MemorySwap           int64
	MemorySwappiness     *int64
	OomKillDisable       bool
	PidsLimit            int64
	Ulimits              []struct{}
	CpuCount             int64
	CpuPercent           int64
	IOMaximumIOps        int64
	IOMaximumBandwidth   int64
	MaskedPaths          []string
	ReadonlyPaths        []string
	Mounts               []dockercompat.MountRecord
	Tmpfs                map[string]string
	Init                 *bool `json:",omitempty"`
}

// NetworkSettings is inspect's NetworkSettings.
type NetworkSettings struct {
	Bridge                 string
	SandboxID              string
	SandboxKey             string
	HairpinMode            bool
	LinkLocalIPv6Address   string
	LinkLocalIPv6PrefixLen int
	SecondaryIPAddresses   []struct{}
	SecondaryIPv6Addresses []struct{}
	Ports                  PortMap
	Networks               map[string]*EndpointSettings
	EndpointID             string
	Gateway                string
	IPAddress              string
	IPPrefixLen            int
	IPv6Gateway            string
	GlobalIPv6Address      string
	GlobalIPv6PrefixLen    int
	MacAddress             string
}

// EndpointSettings is a container's endpoint on one network.
type EndpointSettings struct {
	IPAMConfig          *EndpointIPAMConfig
	Links               []string
	Aliases             []string
	NetworkID           string
	EndpointID          string
	Gateway             string
	IPAddress           string
	IPPrefixLen         int
	IPv6Gateway         string
	GlobalIPv6Address   string
	GlobalIPv6PrefixLen int
	MacAddress          string
	DriverOpts          map[string]string
	DNSNames            []string
}

// EndpointIPAMConfig is the address a connect or create asked for.
type EndpointIPAMConfig struct {
	IPv4Address string
}

// PortMap is published ports by container port and protocol ("80/tcp").
type PortMap map[string][]PortBinding

// PortBinding is where a container port is published on the host.
type PortBinding struct {
	HostIp   string //nolint:revive // Docker's name
	HostPort string
}
