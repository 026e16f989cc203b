#!/bin/sh
# Writes the fake sysfs trees under this directory. They mimic what Linux
# shows under /sys/class/net and /sys/class/infiniband, with one change: the
# "device" symlinks into /sys/devices are plain directories holding what the
# discovery reads (uevent with PCI_SLOT_NAME, numa_node, infiniband/).
#
#   gb200-tray  a GB200 compute tray: 4 InfiniBand CX-7 (one port down, one
#               without IPoIB), a BlueField-3 RoCE front end, 1GbE management,
#               docker0 and a veth.
#   cloud-vm    a virtio VM NIC (no PCI address in the device directory).
#   dualport    one dual-port ConnectX-3 (mlx4_0 ports 1 and 2 -> ib0, ib1).
#
# Run from this directory: sh make-fake-sysfs.sh
set -e
rm -rf gb200-tray cloud-vm dualport
w() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" > "$1"; }
netdev() { # root name type flags operstate mtu address
  d=$1/class/net/$2; w $d/type $3; w $d/flags $4; w $d/operstate $5; w $d/mtu $6; w $d/address $7
}
pcidev() { # dir driver slot numa
  w $1/uevent "DRIVER=$2
PCI_SLOT_NAME=$3"; w $1/numa_node $4
}
port() { # root hca n state rate layer
  d=$1/class/infiniband/$2/ports/$3; w $d/state "$4"; w $d/rate "$5"; w $d/link_layer $6
  case "$4" in *ACTIVE) w $d/phys_state "5: LinkUp";; *) w $d/phys_state "3: Disabled";; esac
}

R=gb200-tray
netdev $R lo 772 0x9 unknown 65536 00:00:00:00:00:00
netdev $R eno1 1 0x1003 up 1500 7c:c2:55:4a:10:02
w $R/class/net/eno1/speed 1000; w $R/class/net/eno1/dev_port 0
pcidev $R/class/net/eno1/device igb 0008:01:00.0 0
netdev $R enP6p1s0f0np0 1 0x1003 up 9000 a0:88:c2:3b:5e:10
w $R/class/net/enP6p1s0f0np0/speed 200000; w $R/class/net/enP6p1s0f0np0/dev_port 0
pcidev $R/class/net/enP6p1s0f0np0/device mlx5_core 0006:01:00.0 0
w $R/class/net/enP6p1s0f0np0/device/infiniband/mlx5_4/node_type "1: CA"
for spec in "ib0 mlx5_0 0000:03:00.0 0 up" "ib1 mlx5_1 0010:03:00.0 1 up" "ib3 mlx5_3 0012:03:00.0 1 down"; do
  set -- $spec
  netdev $R $1 32 0x1003 $5 4092 "00:00:10:29:fe:80:00:00:00:00:00:00:58:a2:e1:03:00:$3"
  w $R/class/net/$1/dev_port 0
  pcidev $R/class/net/$1/device mlx5_core $3 $4
  w $R/class/net/$1/device/infiniband/$2/node_type "1: CA"
done
netdev $R docker0 1 0x1003 down 1500 02:42:5b:0e:11:7a
netdev $R veth1a2b3c4 1 0x1003 up 1500 3e:91:0c:55:aa:01
pcidev $R/class/infiniband/mlx5_0/device mlx5_core 0000:03:00.0 0
pcidev $R/class/infiniband/mlx5_1/device mlx5_core 0010:03:00.0 1
pcidev $R/class/infiniband/mlx5_2/device mlx5_core 0002:03:00.0 0
pcidev $R/class/infiniband/mlx5_3/device mlx5_core 0012:03:00.0 1
pcidev $R/class/infiniband/mlx5_4/device mlx5_core 0006:01:00.0 0
port $R mlx5_0 1 "4: ACTIVE" "400 Gb/sec (4X NDR)" InfiniBand
port $R mlx5_1 1 "4: ACTIVE" "400 Gb/sec (4X NDR)" InfiniBand
port $R mlx5_2 1 "4: ACTIVE" "400 Gb/sec (4X NDR)" InfiniBand
port $R mlx5_3 1 "1: DOWN" "10 Gb/sec (4X SDR)" InfiniBand
port $R mlx5_4 1 "4: ACTIVE" "200 Gb/sec (4X HDR)" Ethernet

R=cloud-vm
netdev $R lo 772 0x9 unknown 65536 00:00:00:00:00:00
netdev $R eth0 1 0x1003 up 9001 06:5e:21:9c:4b:07
w $R/class/net/eth0/device/uevent "DRIVER=virtio_net
MODALIAS=virtio:d00000001v00001AF4"
netdev $R docker0 1 0x1003 down 1500 02:42:ac:11:00:01

R=dualport
netdev $R lo 772 0x9 unknown 65536 00:00:00:00:00:00
netdev $R eth0 1 0x1003 up 1500 52:54:00:12:34:56
w $R/class/net/eth0/speed 10000
pcidev $R/class/net/eth0/device ixgbe 0000:01:00.0 0
for spec in "ib0 0" "ib1 1"; do
  set -- $spec
  netdev $R $1 32 0x1003 up 2044 "80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0$2"
  w $R/class/net/$1/dev_port $2
  pcidev $R/class/net/$1/device mlx4_core 0000:82:00.0 1
  w $R/class/net/$1/device/infiniband/mlx4_0/node_type "1: CA"
done
pcidev $R/class/infiniband/mlx4_0/device mlx4_core 0000:82:00.0 1
port $R mlx4_0 1 "4: ACTIVE" "56 Gb/sec (4X FDR)" InfiniBand
port $R mlx4_0 2 "4: ACTIVE" "56 Gb/sec (4X FDR)" InfiniBand
