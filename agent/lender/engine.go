package lender

import (
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// Resource is one thing on the Docker engine carrying Berth's labels.
type Resource struct {
	Kind   string // control.KindContainer, KindVolume or KindNetwork
	Name   string
	Labels map[string]string
}

// Engine lists and removes the resources one deployment left on a Docker
// engine, kind by kind, for cleanup prompts.
type Engine interface {
	// Resources lists the containers, volumes and networks whose
	// dev.berth.deployment label is deployment.
	Resources(ctx context.Context, deployment string) ([]Resource, error)
	// Remove removes one resource; a resource that is gone is not an error.
	Remove(ctx context.Context, kind, name string) error
	Close() error
}

// DockerEngine is the Engine of a Docker engine reached at a DOCKER_SOCKET
// address.
type DockerEngine struct {
	cli *client.Client
	// gc removes volumes the provider's way: a computer's disk volume
	// gives its loop device back first (docker.Collector.RemoveVolume).
	gc *docker.Collector
}

// NewDockerEngine returns an Engine for the engine at host
// (unix:///var/run/docker.sock, tcp://host:port).
func NewDockerEngine(host string) (*DockerEngine, error) {
	cli, err := client.New(client.WithHost(host))
	if err != nil {
		return nil, fmt.Errorf("docker engine %s: %w", host, err)
	}
	gc, err := docker.NewCollector(host, nil, nil)
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker engine %s: %w", host, err)
	}
	return &DockerEngine{cli: cli, gc: gc}, nil
}

// Close releases the engine's connections.
func (e *DockerEngine) Close() error {
	e.gc.Close()
	return e.cli.Close()
}

// Resources implements Engine.
func (e *DockerEngine) Resources(ctx context.Context, deployment string) ([]Resource, error) {
	f := make(client.Filters).Add("label", providers.LabelDeployment+"="+deployment)
	var out []Resource
	cs, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs.Items {
		name := c.ID
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, Resource{Kind: control.KindContainer, Name: name, Labels: c.Labels})
	}
	vs, err := e.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	for _, v := range vs.Items {
		out = append(out, Resource{Kind: control.KindVolume, Name: v.Name, Labels: v.Labels})
	}
	ns, err := e.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	for _, n := range ns.Items {
		out = append(out, Resource{Kind: control.KindNetwork, Name: n.Name, Labels: n.Labels})
	}
	return out, nil
}

// Remove implements Engine.
func (e *DockerEngine) Remove(ctx context.Context, kind, name string) error {
	var err error
	switch kind {
	case control.KindContainer:
		_, err = e.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
	case control.KindVolume:
		err = e.gc.RemoveVolume(ctx, name)
	case control.KindNetwork:
		_, err = e.cli.NetworkRemove(ctx, name, client.NetworkRemoveOptions{})
	default:
		return fmt.Errorf("remove %s: unknown kind %q", name, kind)
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove %s %s: %w", kind, name, err)
	}
	return nil
}

var _ Engine = (*DockerEngine)(nil)
