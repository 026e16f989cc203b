package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Network is a switched Ethernet segment of Linux network namespaces, made
// for one test and torn down by Close:
//
//	root namespace              switch namespace               host namespaces
//	Uplink  10.231.X.1/24 ─veth─ up0 ─┐
//	                                  br0 ─ hN ─veth─ eth0  10.231.X.(10+N)/24
//
// The root namespace has the address Gateway on the segment (a server
// listening there is reachable from every host); each host has its own
// namespace, address and cable (Unplug, Plug).
//
// The bridge sits in a namespace of its own rather than in the root
// namespace on purpose: where br_netfilter is loaded (Docker loads it and
// sets the FORWARD policy to DROP), frames bridged between two ports of a
// root-namespace bridge pass the root namespace's iptables FORWARD chain
// and are silently dropped, cutting host from host while each still reaches
// the root namespace. A fresh namespace has an empty, accepting firewall,
// so nothing on the machine needs changing.
//
// Every name starts with Name, a random "gwe2e" prefix, so concurrent or
// leftover networks never clash; the /24 is chosen at random among
// 10.231.0.0/16's subnets that no local interface uses.
type Network struct {
	// Name prefixes every namespace and link this network creates.
	Name string
	// Switch is the namespace holding the bridge.
	Switch string
	// Uplink is the root namespace's end of the veth into the switch.
	Uplink string
	// Subnet is the segment's /24; Gateway is Uplink's address in it.
	Subnet  netip.Prefix
	Gateway netip.Addr
	Hosts   []Host

	ip string // path of the ip binary

	// What exists, for Close.
	namespaces []string
	uplinkMade bool
}

// Host is one machine on the segment.
type Host struct {
	// NS is the host's network namespace.
	NS string
	// IP is the host's address (on eth0 inside NS).
	IP netip.Addr
	// Port is the switch's end of the host's cable, a link in Switch.
	Port string
}

// NewNetwork builds a segment with the given number of hosts. It needs
// root and iproute2's ip. On error, whatever it made is removed again.
func NewNetwork(ctx context.Context, hosts int) (*Network, error) {
	if hosts < 1 || hosts > 200 {
		return nil, fmt.Errorf("netns: %d hosts: want 1 to 200", hosts)
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("netns: iproute2's ip: %w", err)
	}
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("netns: random name: %w", err)
	}
	name := "gwe2e" + hex.EncodeToString(b[:]) // 11 bytes: link names allow 15
	subnet, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	n := &Network{
		Name: name, Switch: name + "-sw", Uplink: name, ip: ip,
		Subnet: subnet, Gateway: subnet.Addr().Next(),
	}
	for i := range hosts {
		n.Hosts = append(n.Hosts, Host{
			NS:   fmt.Sprintf("%s-h%d", name, i+1),
			IP:   addrAt(subnet, 11+i),
			Port: fmt.Sprintf("h%d", i+1),
		})
	}
	if err := n.build(ctx); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return nil, errors.Join(err, n.Close(cctx))
	}
	return n, nil
}

func (n *Network) build(ctx context.Context) error {
	bits := strconv.Itoa(n.Subnet.Bits())
	sw := n.Switch
	if err := n.addNamespace(ctx, sw); err != nil {
		return err
	}
	steps := [][]string{
		{"-n", sw, "link", "set", "lo", "up"},
		{"-n", sw, "link", "add", "br0", "type", "bridge"},
		{"-n", sw, "link", "set", "br0", "up"},
	}
	if err := n.runAll(ctx, steps); err != nil {
		return err
	}
	if err := n.run(ctx, "link", "add", n.Uplink, "type", "veth", "peer", "name", "up0", "netns", sw); err != nil {
		return err
	}
	n.uplinkMade = true
	steps = [][]string{
		{"-n", sw, "link", "set", "up0", "master", "br0", "up"},
		{"addr", "add", n.Gateway.String() + "/" + bits, "dev", n.Uplink},
		{"link", "set", n.Uplink, "up"},
	}
	if err := n.runAll(ctx, steps); err != nil {
		return err
	}
	for _, h := range n.Hosts {
		if err := n.addNamespace(ctx, h.NS); err != nil {
			return err
		}
		steps := [][]string{
			{"-n", h.NS, "link", "set", "lo", "up"},
			{"-n", sw, "link", "add", h.Port, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
			{"-n", sw, "link", "set", h.Port, "master", "br0", "up"},
			{"-n", h.NS, "addr", "add", h.IP.String() + "/" + bits, "dev", "eth0"},
			{"-n", h.NS, "link", "set", "eth0", "up"},
		}
		if err := n.runAll(ctx, steps); err != nil {
			return err
		}
	}
	return nil
}

func (n *Network) addNamespace(ctx context.Context, ns string) error {
	if err := n.run(ctx, "netns", "add", ns); err != nil {
		return err
	}
	n.namespaces = append(n.namespaces, ns)
	return nil
}

// Command returns an unstarted command that runs name with args inside
// host's namespace (through `ip netns exec`, which execs name in place, so
// the command's process is name's process).
func (n *Network) Command(host int, name string, args ...string) *exec.Cmd {
	return exec.Command(n.ip, append([]string{"netns", "exec", n.Hosts[host].NS, name}, args...)...)
}

// Pids lists the processes in host's namespace.
func (n *Network) Pids(ctx context.Context, host int) ([]int, error) {
	return n.pids(ctx, n.Hosts[host].NS)
}

func (n *Network) pids(ctx context.Context, ns string) ([]int, error) {
	out, err := n.output(ctx, "netns", "pids", ns)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("netns: ip netns pids %s: bad pid %q", ns, f)
		}
		pids = append(pids, p)
	}
	return pids, nil
}

// KillHost is the machine dying: SIGKILL to every process in host's
// namespace, repeated until none is left (so a process forked meanwhile
// dies too). It returns the pids it signalled.
func (n *Network) KillHost(ctx context.Context, host int) ([]int, error) {
	return n.killAll(ctx, n.Hosts[host].NS)
}

func (n *Network) killAll(ctx context.Context, ns string) ([]int, error) {
	var killed []int
	sent := map[int]bool{}
	for {
		pids, err := n.pids(ctx, ns)
		if err != nil {
			return killed, err
		}
		if len(pids) == 0 {
			return killed, nil
		}
		for _, p := range pids {
			if err := syscall.Kill(p, syscall.SIGKILL); err == nil {
				if !sent[p] {
					sent[p] = true
					killed = append(killed, p)
				}
			} else if !errors.Is(err, syscall.ESRCH) {
				return killed, fmt.Errorf("netns: kill %d in %s: %w", p, ns, err)
			}
		}
		select {
		case <-ctx.Done():
			return killed, fmt.Errorf("netns: processes in %s survive SIGKILL: %w", ns, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Unplug pulls host's cable out at the switch: its port goes down, the
// host's eth0 loses carrier, and the host can reach no one while its
// processes keep running.
func (n *Network) Unplug(ctx context.Context, host int) error {
	return n.run(ctx, "-n", n.Switch, "link", "set", n.Hosts[host].Port, "down")
}

// Plug puts host's cable back.
func (n *Network) Plug(ctx context.Context, host int) error {
	return n.run(ctx, "-n", n.Switch, "link", "set", n.Hosts[host].Port, "up")
}

// Close kills every process in the network's namespaces and deletes the
// namespaces and the uplink. It removes what it can and reports the rest.
func (n *Network) Close(ctx context.Context) error {
	var errs []error
	for i := len(n.namespaces) - 1; i >= 0; i-- {
		ns := n.namespaces[i]
		if _, err := n.killAll(ctx, ns); err != nil {
			errs = append(errs, err)
		}
		if err := n.run(ctx, "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	n.namespaces = nil
	// Deleting the switch namespace frees the uplink's peer only
	// asynchronously; delete the uplink now so the subnet's route goes too.
	if n.uplinkMade {
		if err := n.run(ctx, "link", "del", n.Uplink); err != nil && !linkGone(n.Uplink) {
			errs = append(errs, err)
		}
		n.uplinkMade = false
	}
	return errors.Join(errs...)
}

func linkGone(name string) bool {
	_, err := net.InterfaceByName(name)
	return err != nil
}

func (n *Network) runAll(ctx context.Context, steps [][]string) error {
	for _, s := range steps {
		if err := n.run(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

func (n *Network) run(ctx context.Context, args ...string) error {
	_, err := n.output(ctx, args...)
	return err
}

func (n *Network) output(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, n.ip, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("netns: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// freeSubnet picks a random 10.231.X.0/24 that no local interface has an
// address in.
func freeSubnet() (netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("netns: list local addresses: %w", err)
	}
	var used []netip.Prefix
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			used = append(used, p.Masked())
		}
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return netip.Prefix{}, fmt.Errorf("netns: random subnet: %w", err)
	}
next:
	for _, x := range b {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, x, 0}), 24)
		for _, u := range used {
			if u.Overlaps(p) {
				continue next
			}
		}
		return p, nil
	}
	return netip.Prefix{}, errors.New("netns: no free /24 found in 10.231.0.0/16")
}

// addrAt returns the address host bytes into a /24.
func addrAt(p netip.Prefix, host int) netip.Addr {
	a := p.Addr().As4()
	a[3] = byte(host)
	return netip.AddrFrom4(a)
}
