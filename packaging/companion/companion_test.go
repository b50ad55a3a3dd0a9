package companion

import (
	"bytes"
	"context"
	"debug/elf"
	"debug/pe"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// desktopImage has the X and OpenGL libraries a desktop machine has (and
// nothing of Berth's on its PATH but computerd).
const desktopImage = "berth/desktop:latest"

const version = "v0.0.3"

// build runs build.sh with target into dir and returns the path it printed.
func build(t *testing.T, ctx context.Context, dir, target string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "./build.sh", target)
	cmd.Env = append(os.Environ(), "VERSION="+version, "DIST="+dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("build.sh %s: %v\n%s", target, err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	t.Logf("build.sh %s: %s in %v", target, lines[len(lines)-1], time.Since(t0).Round(time.Millisecond))
	return lines[len(lines)-1]
}

func dpkgField(t *testing.T, deb, field string) string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", "-f", deb, field).Output()
	if err != nil {
		t.Fatalf("dpkg-deb -f %s: %v", field, err)
	}
	return strings.TrimSpace(string(out))
}

// TestDeb builds the companion's Debian package, checks that its Depends
// names the package of every shared library the binary links, and
// installs it in a clean desktop container (no network), where the app
// prints its version, its desktop entry is in place, and removing the
// package leaves nothing of it.
func TestDeb(t *testing.T) {
	testkit.RequireDocker(t, desktopImage)
	testkit.RequireTools(t, "apt-get install -y dpkg libc-bin", "dpkg-deb", "ldd")
	ctx := testkit.ContextTimeout(t, 15*time.Minute)
	dir := t.TempDir()
	deb := build(t, ctx, dir, "deb")
	if want := "berth-companion_0.0.3_" + runtime.GOARCH + ".deb"; filepath.Base(deb) != want {
		t.Fatalf("build.sh made %s, want %s", filepath.Base(deb), want)
	}
	if got := dpkgField(t, deb, "Package"); got != "berth-companion" {
		t.Errorf("Package: %q", got)
	}
	if got := dpkgField(t, deb, "Version"); got != "0.0.3" {
		t.Errorf("Version: %q", got)
	}
	var depends []string
	for _, d := range strings.Split(dpkgField(t, deb, "Depends"), ",") {
		depends = append(depends, strings.TrimSpace(d))
	}

	// Every library the binary names (DT_NEEDED; what those need in turn
	// comes with their packages) is from a package Depends names.
	bin := filepath.Join(dir, "berth-companion-linux-"+runtime.GOARCH)
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	needed, err := ef.ImportedLibraries()
	ef.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Fatalf("ldd: %v", err)
	}
	paths := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		name, path, ok := strings.Cut(strings.TrimSpace(line), " => ")
		if ok {
			path, _, _ = strings.Cut(path, " (")
			paths[name] = path
		}
	}
	for _, lib := range needed {
		path := paths[lib]
		if !strings.HasPrefix(path, "/") {
			t.Errorf("%s is not found on this machine: %q", lib, path)
			continue
		}
		owner, err := exec.Command("dpkg", "-S", path).Output()
		if err != nil {
			// Since the /usr merge dpkg may know the library under the
			// other of /lib and /usr/lib.
			alt := "/usr" + path
			if strings.HasPrefix(path, "/usr/") {
				alt = strings.TrimPrefix(path, "/usr")
			}
			owner, err = exec.Command("dpkg", "-S", alt).Output()
		}
		if err != nil {
			t.Errorf("no Debian package owns %s", path)
			continue
		}
		pkg, _, _ := strings.Cut(string(owner), ":")
		if !slices.Contains(depends, pkg) {
			t.Errorf("the binary needs %s from %s, which Depends (%s) does not name", lib, pkg, strings.Join(depends, ", "))
		}
	}
	if !slices.Contains(needed, "libGL.so.1") || !slices.Contains(needed, "libX11.so.6") {
		t.Errorf("the GLFW app needs libGL and libX11; it names %v", needed)
	}

	script := `set -e
dpkg -i /pkg/` + filepath.Base(deb) + `
berth-companion -version
test -f /usr/share/applications/dev.berth.companion.desktop
test -f /usr/share/icons/hicolor/256x256/apps/dev.berth.companion.png
dpkg -r berth-companion >/dev/null
if [ -e /usr/bin/berth-companion ] || dpkg -s berth-companion >/dev/null 2>&1; then echo "left behind"; exit 1; fi
echo removed`
	cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "sh",
		"-v", dir+":/pkg:ro", desktopImage, "-c", script)
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install in %s: %v\n%s", desktopImage, err, got)
	}
	if !strings.Contains(string(got), "berth-companion "+version+"\n") || !strings.HasSuffix(string(got), "removed\n") {
		t.Errorf("install, run and remove:\n%s", got)
	}
}

// systemDLLs are the libraries every Windows 10 and 11 has; the .exe may
// import these and no other (a mingw runtime DLL such as
// libwinpthread-1.dll would make it fail to start on a user's machine).
var systemDLLs = []string{
	"advapi32.dll", "bcrypt.dll", "comctl32.dll", "comdlg32.dll", "crypt32.dll", "dwmapi.dll",
	"gdi32.dll", "imm32.dll", "iphlpapi.dll", "kernel32.dll", "msvcrt.dll", "ntdll.dll",
	"ole32.dll", "oleaut32.dll", "opengl32.dll", "powrprof.dll", "secur32.dll", "setupapi.dll",
	"shell32.dll", "shlwapi.dll", "user32.dll", "userenv.dll", "uxtheme.dll", "version.dll",
	"winmm.dll", "ws2_32.dll",
}

// TestWindowsExe cross-builds the companion for Windows and checks the
// .exe: a 64-bit GUI program (no console window) that imports only
// Windows' own DLLs, OpenGL and the window system among them, with the
// version stamped in.
func TestWindowsExe(t *testing.T) {
	testkit.RequireTools(t, "apt-get install -y gcc-mingw-w64-x86-64-posix", "x86_64-w64-mingw32-gcc-posix")
	ctx := testkit.ContextTimeout(t, 25*time.Minute)
	exe := build(t, ctx, t.TempDir(), "windows")
	if filepath.Base(exe) != "berth-companion-windows-amd64.exe" {
		t.Fatalf("build.sh made %s", exe)
	}
	f, err := pe.Open(exe)
	if err != nil {
		t.Fatalf("not a PE file: %v", err)
	}
	defer f.Close()
	if f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 {
		t.Errorf("machine %#x, want AMD64", f.Machine)
	}
	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		t.Fatalf("optional header %T, want PE32+", f.OptionalHeader)
	}
	if oh.Subsystem != pe.IMAGE_SUBSYSTEM_WINDOWS_GUI {
		t.Errorf("subsystem %d, want the Windows GUI (%d)", oh.Subsystem, pe.IMAGE_SUBSYSTEM_WINDOWS_GUI)
	}
	// debug/pe does not list a PE file's libraries (ImportedLibraries is
	// empty for PE); each imported symbol is "name:dll".
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var dlls []string
	for _, sym := range syms {
		_, dll, _ := strings.Cut(sym, ":")
		if dll = strings.ToLower(dll); !slices.Contains(dlls, dll) {
			dlls = append(dlls, dll)
		}
	}
	slices.Sort(dlls)
	for _, d := range dlls {
		if !slices.Contains(systemDLLs, d) {
			t.Errorf("the .exe imports %s, which Windows does not ship", d)
		}
	}
	for _, want := range []string{"opengl32.dll", "user32.dll", "gdi32.dll", "kernel32.dll"} {
		if !slices.Contains(dlls, want) {
			t.Errorf("the .exe does not import %s: %v", want, dlls)
		}
	}
	t.Logf("imports: %s", strings.Join(dlls, " "))
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(version)) {
		t.Errorf("the .exe does not hold its version %s", version)
	}
}
