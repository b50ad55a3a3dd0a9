package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/volume"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/providers"
)

// A computer's disk quota (COMPUTER_DISK_MB). The root filesystem of a
// computer is read-only and /tmp and /dev/shm are sized tmpfs, so its home
// is the only place it can write to disk. With a quota, the home is a
// filesystem of its own, as big as the quota:
//
//   - The disk volume (DiskPrefix + computer id, a plain local volume on the
//     engine's host) holds one sparse file, disk.img, with an ext4 (or, in a
//     busybox image, ext2) filesystem in it. Sparse: the file takes host
//     space only as the computer writes, up to the quota.
//   - A loop device on the engine's host backs that file, and the home
//     volume (VolumePrefix + computer id) is a local volume of type ext4
//     whose device is that loop device. The engine mounts it when the
//     container starts; a write past the quota fails with ENOSPC.
//
// The engine's local driver mounts with the mount syscall, which does not
// set up loop devices, and making one takes privileges a lending agent (a
// user in the docker group) does not have on its own. So the privileged
// steps run in a helper container (kept standing and given each step on
// its standard input, see diskhelper.go): the computer's own image
// (which has mkfs and losetup: Debian's, or busybox's), as root with only
// CAP_SYS_ADMIN, CAP_CHOWN and CAP_DAC_OVERRIDE, access to the loop block
// devices and /dev/loop-control and nothing else, no network, a read-only
// root filesystem, no new privileges, and a fixed script whose only inputs
// are the disk's file, a size and a user. Whoever may use the engine is root on its host
// anyway; the helper only does, in a container, what such a user could do,
// and it runs an image only the engine's users can change, never anything
// a computer controls. It works the same whether the caller is root, in
// the docker group, in a container, or on another host (tcp://), since only
// the engine's host is touched, and only through the engine.
//
// A loop device is known by the UUID of the filesystem it backs (loop
// devices show paths as a container saw them, which say nothing), never by
// its number alone: the release helper detaches every loop device whose
// filesystem has disk.img's UUID, so a loop device that went away (a host
// reboot) and was reused by another computer is never touched. Removing a
// computer (Destroy, a failed create's cleanup, the garbage collector)
// removes its home volume, then detaches its loop devices and deletes
// disk.img (the release helper), then removes the disk volume.
//
// When the helper cannot run (no mkfs in the image, no loop devices, a
// runtime that forbids it), creating the computer fails with an error
// naming COMPUTER_DISK_MB; it never runs without the limit. Setting 0 turns
// the quota off: the home is then an unlimited volume on the engine's disk,
// which a computer can fill (unsafe outside development).

// DiskPrefix starts the name of a computer's disk volume; the computer id
// follows.
const DiskPrefix = "berth-d-"

// LabelDiskImage, on a disk volume, names the image its helper ran, so that
// the release helper can run the same one.
const LabelDiskImage = "dev.berth.disk-image"

// labelDiskHelper marks a helper container.
const labelDiskHelper = "dev.berth.disk-helper"

// helperLease bounds how long a helper container may live before it is
// garbage (plus the grace).
const helperLease = 5 * time.Minute

// helperPids bounds the processes of a helper.
var helperPids int64 = 64

// diskFile is the filesystem image in the disk volume, mounted at /disk in
// the helper.
const diskFile = "/disk/disk.img"

// helperFuncs start both helper scripts, whose first argument is the disk
// file (f; the filesystem's type is kept beside it in tf), and define
// shell functions: uuid prints the UUID of the ext2/3/4 filesystem in a
// file or device (16 bytes at 1024 + 0x68), loops prints the loop devices
// that back f's filesystem.
const helperFuncs = `set -eu
f=$1
tf=${f%/*}/type
shift
uuid() { dd if="$1" bs=1 skip=1128 count=16 2>/dev/null | od -An -tx1 | tr -d ' \n'; }
loops() {
	u=$(uuid "$f")
	for s in /sys/block/loop*; do
		[ -e "$s/loop" ] || continue
		d=/dev/${s##*/}
		[ "$(uuid "$d")" != "$u" ] || echo "$d"
	done
}
`

// makeScript makes the filesystem ($1 bytes, its root owned by $2), backs it
// with a loop device and prints "berth-disk DEVICE TYPE". lost+found is
// removed so that the engine copies the image's home into the empty volume.
// A filesystem made before (a create of the same attempt, again) is kept
// with its loop device, which the home volume of that attempt names. Each
// run mounts the filesystem on a folder of its own, since runs of a
// standing helper share its /m.
const makeScript = helperFuncs + `if [ -f "$f" ] && [ -f "$tf" ]; then
	l=$(loops | head -n 1)
	if [ -n "$l" ]; then
		echo "berth-disk $l $(cat "$tf")"
		exit 0
	fi
fi
rm -f "$f" "$tf"
truncate -s "$1" "$f"
if command -v mkfs.ext4 >/dev/null 2>&1; then
	t=ext4
	mkfs.ext4 -q -F -m 0 -J size=4 -E lazy_itable_init=1,lazy_journal_init=1 "$f" >&2
else
	# busybox's mke2fs writes all inode tables out: one inode per 16 KiB
	# (its default) up to 16,384 inodes keeps them at most 4 MiB.
	t=ext2
	i=$(($1 / 16384))
	[ "$i" -ge 16384 ] || i=16384
	mke2fs -F -m 0 -i "$i" "$f" >/dev/null
fi
[ -n "$(uuid "$f" | tr -d 0)" ] || { echo "the filesystem has no UUID" >&2; exit 1; }
echo "$t" > "$tf"
# The kernel adds a new loop device's node to /dev a moment after it hands
# out its number; busybox's losetup does not wait for it.
for i in 1 2 3 4 5 6 7 8 9 10; do
	losetup -f "$f" && break
	[ $i = 10 ] && exit 1
	sleep 1
done
# The device whose backing file this helper named $f, when its filesystem
# is f's, is the one; otherwise (a helper of another kind attached the same
# name) every loop device is looked at.
u=$(uuid "$f")
l=
for s in /sys/block/loop*; do
	[ -e "$s/loop/backing_file" ] || continue
	read -r b <"$s/loop/backing_file" || continue
	[ "$b" = "$f" ] && [ "$(uuid "/dev/${s##*/}")" = "$u" ] || continue
	l=/dev/${s##*/}
	break
done
[ -n "$l" ] || l=$(loops | head -n 1)
[ -n "$l" ] || { echo "no loop device took $f" >&2; exit 1; }
m=$(mktemp -d /m/d.XXXXXX)
trap 'umount "$m" 2>/dev/null || :; rmdir "$m" 2>/dev/null || :' EXIT
mount -t "$t" "$l" "$m"
chmod 0755 "$m"
chown "$2" "$m"
rmdir "$m/lost+found"
umount "$m"
echo "berth-disk $l $t"
`

// releaseScript detaches the loop devices of diskFile's filesystem (a busy
// one lets go when it is unmounted) and deletes the file.
const releaseScript = helperFuncs + `[ -f "$f" ] || exit 0
for l in $(loops); do losetup -d "$l"; done
rm -f "$f" "$tf"
`

var diskLine = regexp.MustCompile(`(?m)^berth-disk (/dev/loop[0-9]+) (ext[24])\s*$`)

// errNotStarted marks a helper whose script never ran.
var errNotStarted = errors.New("the helper did not start")

// diskError is a failure to set up the disk quota.
func diskError(mb int64, err error) error {
	return fmt.Errorf("disk quota (%s=%d; %s=0 turns it off, which lets a computer fill the host's disk): %w",
		SettingDiskMB, mb, SettingDiskMB, err)
}

// createHome creates a computer's home volume: with a quota, a filesystem
// of DiskMB on a loop device, made by a helper running image; without, a
// plain volume.
func (d *Docker) createHome(ctx context.Context, computerID, image string, labels map[string]string) error {
	n := namesOf(computerID)
	if d.opts.DiskMB == NoDiskLimit {
		_, err := d.createVolume(ctx, n.volume, labels, nil)
		return err
	}
	// A leftover home fails the create before any disk is made for it.
	if v, err := d.cli.VolumeInspect(ctx, n.volume, client.VolumeInspectOptions{}); err == nil {
		if got := v.Volume.Labels[providers.LabelAttempt]; got != labels[providers.LabelAttempt] {
			return fmt.Errorf("create volume %s: %w (volume of attempt %q); destroy the computer first", n.volume, ErrLeftover, got)
		}
	}
	diskName := DiskPrefix + computerID
	diskLabels := maps.Clone(labels)
	diskLabels[LabelDiskImage] = image
	disk, err := d.createVolume(ctx, diskName, diskLabels, nil)
	if err != nil {
		return err
	}
	out, err := d.diskStep(ctx, image, disk, opMake,
		strconv.FormatInt(d.opts.DiskMB<<20, 10), User)
	if errors.Is(err, errNotStarted) {
		// Nothing was made in the volume: it can go without a release,
		// which might not run either.
		if _, rerr := d.cli.VolumeRemove(context.WithoutCancel(ctx), diskName, client.VolumeRemoveOptions{}); rerr != nil && !cerrdefs.IsNotFound(rerr) {
			d.log.Warn("remove unused disk volume", "volume", diskName, "err", rerr)
		}
	}
	if err != nil {
		return diskError(d.opts.DiskMB, err)
	}
	m := diskLine.FindStringSubmatch(out)
	if m == nil {
		return diskError(d.opts.DiskMB, fmt.Errorf("the helper said %q", strings.TrimSpace(out)))
	}
	_, err = d.createVolume(ctx, n.volume, labels, map[string]string{
		"type":   m[2],
		"device": m[1],
		"o":      "nosuid,nodev",
	})
	if err != nil {
		return diskError(d.opts.DiskMB, err)
	}
	return nil
}

// runHelper runs script in a helper container of its own, of image with
// the volume diskVolume at /disk, and returns its output. The container is
// removed whatever happens.
func (d *Docker) runHelper(ctx context.Context, image, diskVolume, script string, args ...string) (string, error) {
	res, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: helperConfig(image, d.expiresLabel(helperLease), []string{"/bin/sh", "-c", script, "berth-disk"}, args),
		HostConfig: helperHostConfig(mount.Mount{Type: mount.TypeVolume, Source: diskVolume, Target: "/disk"},
			128<<20, &helperPids, false),
	})
	if err != nil {
		return "", fmt.Errorf("create helper container from %s: %w (%w)", image, d.engineErr(err), errNotStarted)
	}
	id := res.ID
	defer d.removeHelper(ctx, id)
	waitCtx, cancelWait := context.WithCancel(ctx)
	wait := d.cli.ContainerWait(waitCtx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	waited := false
	defer func() {
		cancelWait()
		if !waited { // let the client's waiting goroutine end
			select {
			case <-wait.Result:
			case <-wait.Error:
			}
		}
	}()
	if _, err := d.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return "", fmt.Errorf("start helper container from %s: %w (%w)", image, d.engineErr(err), errNotStarted)
	}
	var code int64
	select {
	case r := <-wait.Result:
		code = r.StatusCode
	case err := <-wait.Error:
		waited = true
		return "", fmt.Errorf("wait for helper container: %w", d.engineErr(err))
	}
	waited = true
	out, err := d.helperOutput(ctx, id)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return "", fmt.Errorf("helper container exited with %d: %s", code, strings.TrimSpace(out))
	}
	return out, nil
}

func (d *Docker) helperOutput(ctx context.Context, id string) (string, error) {
	logs, err := d.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", fmt.Errorf("read helper output: %w", d.engineErr(err))
	}
	defer logs.Close()
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.LimitReader(logs, 64<<10)); err != nil {
		return "", fmt.Errorf("read helper output: %w", err)
	}
	return b.String(), nil
}

// isDiskVolume reports whether a volume is a computer's disk volume.
func isDiskVolume(name string) bool { return strings.HasPrefix(name, DiskPrefix) }

// removeVolumes removes volumes: homes and others first, then disk volumes,
// each after its loop devices are detached and its file deleted.
func (d *Docker) removeVolumes(ctx context.Context, vs []volume.Volume) error {
	var errs []error
	for _, v := range sortDisksLast(vs) {
		if err := d.removeVolume(ctx, v, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sortDisksLast returns vs with the disk volumes after the others, whose
// loop devices they back.
func sortDisksLast(vs []volume.Volume) []volume.Volume {
	vs = slices.Clone(vs)
	slices.SortStableFunc(vs, func(a, b volume.Volume) int {
		switch ad, bd := isDiskVolume(a.Name), isDiskVolume(b.Name); {
		case ad == bd:
			return 0
		case bd:
			return -1
		}
		return 1
	})
	return vs
}

// removeVolume removes one volume (with force, even when its driver fails
// to); a disk volume is released first.
func (d *Docker) removeVolume(ctx context.Context, v volume.Volume, force bool) error {
	if isDiskVolume(v.Name) {
		if err := d.releaseDisk(ctx, v); err != nil {
			return err
		}
	}
	if _, err := d.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: force}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove volume %s: %w", v.Name, d.engineErr(err))
	}
	return nil
}

// releaseDisk detaches a disk volume's loop devices and deletes its file,
// with a helper of the image that made it (or, when that one cannot start,
// the headless or desktop image). When no helper runs, the volume is kept
// (and the next removal tries again): removing the file would leave its
// loop device, and the space, held for good.
func (d *Docker) releaseDisk(ctx context.Context, v volume.Volume) error {
	var images []string
	for _, im := range []string{v.Labels[LabelDiskImage], d.opts.HeadlessImage, d.opts.DesktopImage} {
		if im != "" && !slices.Contains(images, im) {
			images = append(images, im)
		}
	}
	if err := d.removeHelpersOf(ctx, v.Name); err != nil {
		return fmt.Errorf("release disk volume %s: %w", v.Name, err)
	}
	var errs []error
	for _, im := range images {
		_, err := d.diskStep(ctx, im, v, opRelease)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errNotStarted) {
			break
		}
	}
	return fmt.Errorf("release disk volume %s: %w", v.Name, errors.Join(errs...))
}

// removeHelpersOf removes the helper containers that mount a disk volume.
// A helper outlives a process killed while it ran, and holds the volume
// until removed; a loop device it attached is the release helper's to
// detach.
func (d *Docker) removeHelpersOf(ctx context.Context, diskVolume string) error {
	f := make(client.Filters).Add("label", labelDiskHelper+"=true").Add("volume", diskVolume)
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return fmt.Errorf("list disk helpers: %w", d.engineErr(err))
	}
	for _, c := range res.Items {
		if _, err := d.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove disk helper %s: %w", c.ID, d.engineErr(err))
		}
	}
	return nil
}

// volumesOf lists a computer's volumes (of one attempt when attemptID is
// set).
func (d *Docker) volumesOf(ctx context.Context, computerID, attemptID string) ([]volume.Volume, error) {
	res, err := d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: labelFilter(computerID, attemptID)})
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", d.engineErr(err))
	}
	return res.Items, nil
}

// RemoveVolume removes a volume Berth made on the collector's engine, as
// Destroy does: a disk volume after its loop devices are detached and its
// file deleted (removing it with the engine alone would leave its loop
// device, and its space, held until the host reboots). Remove the home
// volume first. A missing volume is not an error.
func (c *Collector) RemoveVolume(ctx context.Context, name string) error {
	res, err := c.d.cli.VolumeInspect(ctx, name, client.VolumeInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect volume %s: %w", name, c.d.engineErr(err))
	}
	return c.d.removeVolume(ctx, res.Volume, true)
}
