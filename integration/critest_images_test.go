package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// critestImage is one of the images critest pulls, built here: the
// upstream ones are on registries this machine cannot reach.
type critestImage struct {
	refs   []string // every reference that names it (repository:tag)
	files  []imageFile
	config map[string]any // the image config's "config" object
}

type imageFile struct {
	name string
	data []byte
	mode int64
	uid  int
	dir  bool
}

// critestImages lists what the specs of cri-tools v1.37.0 pull and what
// they look for in each (see docs/kubernetes.md). bins holds the static
// helpers built from testdata/critest.
func critestImages(bins map[string][]byte) []critestImage {
	path := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg := func(kv ...any) map[string]any {
		m := map[string]any{"Env": path, "Cmd": []string{"sh"}}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	exe := func(name string, data []byte) imageFile { return imageFile{name: name, data: data, mode: 0o755} }
	// marker makes images that must differ differ.
	marker := func(name string) imageFile {
		return imageFile{name: name, data: []byte(name + "\n"), mode: 0o644}
	}
	const staging = "gcr.io/k8s-staging-cri-tools/"
	user := func(name, u string) critestImage {
		return critestImage{refs: []string{staging + name + ":latest"}, files: []imageFile{marker(name)}, config: cfg("User", u)}
	}
	return []critestImage{
		{refs: []string{"registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9"}, files: []imageFile{exe("pause", bins["pause"])},
			config: map[string]any{"Env": path, "Entrypoint": []string{"/pause"}}},
		{refs: []string{"registry.k8s.io/e2e-test-images/busybox:1.29-2"}, config: cfg()},
		{refs: []string{"registry.k8s.io/e2e-test-images/nginx:1.14-2"}, files: []imageFile{exe("usr/sbin/nginx", bins["webserver"])},
			config: cfg("Cmd", []string{"nginx", "-g", "daemon off;"})},
		{refs: []string{"registry.k8s.io/e2e-test-images/httpd:2.4.39-4"}, files: []imageFile{exe("usr/local/bin/httpd-foreground", bins["webserver"])},
			config: cfg("Cmd", []string{"httpd-foreground"})},
		{refs: []string{"registry.k8s.io/e2e-test-images/nonewprivs:1.3"},
			files:  []imageFile{{name: "usr/local/bin/nonewprivs", data: bins["nonewprivs"], mode: 0o4755}},
			config: cfg("Cmd", nil, "Entrypoint", []string{"/usr/local/bin/nonewprivs"})},
		{refs: []string{staging + "hostnet-nginx-amd64:latest"}, files: []imageFile{exe("usr/sbin/nginx", bins["webserver"])},
			config: cfg("Cmd", []string{"nginx", "-p", "12003"})},
		user("test-image-user-uid", "1002"),
		user("test-image-user-username", "www-data"),
		user("test-image-user-uid-group", "1003:1004"),
		user("test-image-user-username-group", "www-data:1004"),
		{refs: []string{staging + "test-image-predefined-group:latest"}, config: cfg("User", "1000"), files: []imageFile{
			{name: "etc/passwd", mode: 0o644, data: []byte(basePasswd + "default-user:x:1000:1000::/home/default-user:/bin/sh\n")},
			{name: "etc/group", mode: 0o644, data: []byte(baseGroup + "default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n")},
		}},
		{refs: []string{staging + "test-image-latest:latest"}, files: []imageFile{marker("test-image-latest")}, config: cfg()},
		{refs: []string{staging + "test-image-tag:test", staging + "test-image-tag:all"}, files: []imageFile{marker("test-image-tag")}, config: cfg()},
		{refs: []string{staging + "test-image-1:latest"}, files: []imageFile{marker("test-image-1")}, config: cfg()},
		{refs: []string{staging + "test-image-2:latest"}, files: []imageFile{marker("test-image-2")}, config: cfg()},
		{refs: []string{staging + "test-image-3:latest"}, files: []imageFile{marker("test-image-3")}, config: cfg()},
		{refs: []string{staging + "test-image-tags:1", staging + "test-image-tags:2", staging + "test-image-tags:3"},
			files: []imageFile{marker("test-image-tags")}, config: cfg()},
		// test-image-digest is pinned by an upstream digest: it cannot be
		// built, and its spec fails under every handler.
	}
}

const (
	basePasswd = "root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	baseGroup  = "root:x:0:\nwww-data:x:33:\nusers:x:100:\nnogroup:x:65534:\n"
)

// critestBaseLayer is the layer every image but pause starts from: Debian's
// dynamic busybox with its applets as hard links (a static busybox runs
// applets inside its shell, which the masked-paths spec cannot tell from a
// real exec), the host's pgrep and ipcs, and the libraries they load.
func critestBaseLayer(t *testing.T, busybox string) []imageFile {
	t.Helper()
	bb, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatalf("Debian's dynamic busybox: %v (make k8s unpacks it into bin/tools)", err)
	}
	files := []imageFile{}
	for _, d := range []string{"bin", "dev", "etc", "home", "lib", "lib/x86_64-linux-gnu", "lib64", "proc", "root", "run", "sys", "usr", "usr/bin", "usr/sbin", "usr/local", "usr/local/bin", "var", "var/run", "var/www"} {
		files = append(files, imageFile{name: d, dir: true, mode: 0o755})
	}
	files = append(files, imageFile{name: "tmp", dir: true, mode: 0o1777},
		imageFile{name: "bin/busybox", data: bb, mode: 0o755},
		imageFile{name: "etc/passwd", data: []byte(basePasswd), mode: 0o644},
		imageFile{name: "etc/group", data: []byte(baseGroup), mode: 0o644})
	applets, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		t.Fatalf("%s --list: %v", busybox, err)
	}
	for _, a := range strings.Fields(string(applets)) {
		if a != "busybox" {
			// A hard link (data "=TARGET", read by tarLayer); containerd
			// gives the target the link's mode, so it must be busybox's.
			files = append(files, imageFile{name: "bin/" + a, data: []byte("=bin/busybox"), mode: 0o755})
		}
	}
	libs := map[string]bool{}
	for _, bin := range []string{busybox, "/usr/bin/pgrep", "/usr/bin/ipcs"} {
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v (pgrep is in procps, ipcs in util-linux)", bin, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				libs[f[2]] = true
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				libs[f[0]] = true
			}
		}
		if bin != busybox {
			data, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, imageFile{name: strings.TrimPrefix(bin, "/"), data: data, mode: 0o755})
		}
	}
	names := make([]string, 0, len(libs))
	for l := range libs {
		names = append(names, l)
	}
	sort.Strings(names)
	for _, l := range names {
		data, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		// Stored under the name the loader asks for; Debian's /lib is a
		// symlink to usr/lib, the image's a folder.
		files = append(files, imageFile{name: strings.TrimPrefix(l, "/"), data: data, mode: 0o755})
	}
	return files
}

// tarLayer writes files as an uncompressed layer.
func tarLayer(t *testing.T, files []imageFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		case bytes.HasPrefix(f.data, []byte("=")):
			h.Typeflag, h.Linkname = tar.TypeLink, string(f.data[1:])
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(f.data)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// blob is content addressed by its sha256.
type blob struct {
	digest string
	data   []byte
}

func newBlob(data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
}

// gzLayer compresses a layer and returns the blob and its diff id.
func gzLayer(t *testing.T, layer []byte) (blob, string) {
	t.Helper()
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	w.Write(layer)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return newBlob(gz.Bytes()), newBlob(layer).digest
}

// pushCritestImages builds the images and pushes them to the registry at
// base (http://host:port) through client.
func pushCritestImages(t *testing.T, client *http.Client, base, busybox string, bins map[string][]byte) {
	t.Helper()
	baseBlob, baseDiff := gzLayer(t, tarLayer(t, critestBaseLayer(t, busybox)))
	for _, img := range critestImages(bins) {
		layers, diffs := []blob{}, []string{}
		if !strings.Contains(img.refs[0], "/pause:") {
			layers, diffs = append(layers, baseBlob), append(diffs, baseDiff)
		}
		if len(img.files) > 0 {
			b, d := gzLayer(t, tarLayer(t, img.files))
			layers, diffs = append(layers, b), append(diffs, d)
		}
		config, _ := json.Marshal(map[string]any{
			"architecture": "amd64", "os": "linux", "config": img.config,
			"rootfs":  map[string]any{"type": "layers", "diff_ids": diffs},
			"history": []map[string]any{{"created_by": "warden integration test (critest image)"}},
		})
		configBlob := newBlob(config)
		desc := func(mediaType string, b blob) map[string]any {
			return map[string]any{"mediaType": mediaType, "digest": b.digest, "size": len(b.data)}
		}
		layerDescs := []map[string]any{}
		for _, l := range layers {
			layerDescs = append(layerDescs, desc("application/vnd.oci.image.layer.v1.tar+gzip", l))
		}
		manifest, _ := json.Marshal(map[string]any{
			"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
			"config": desc("application/vnd.oci.image.config.v1+json", configBlob), "layers": layerDescs,
		})
		for _, ref := range img.refs {
			repo, tag := mirrorPath(ref)
			for _, b := range append(layers, configBlob) {
				pushBlob(t, client, base, repo, b)
			}
			status, body := registryCall(t, client, http.MethodPut, base+"/v2/"+repo+"/manifests/"+tag, "application/vnd.oci.image.manifest.v1+json", manifest)
			if status != http.StatusCreated {
				t.Fatalf("pushing the manifest of %s: HTTP %d %s", ref, status, body)
			}
		}
	}
}

// mirrorPath is where containerd's mirror looks for ref: the repository
// without its registry host (the mirror serves them all), and the tag.
func mirrorPath(ref string) (repo, tag string) {
	i := strings.LastIndex(ref, ":")
	_, repo, _ = strings.Cut(ref[:i], "/")
	return repo, ref[i+1:]
}

func pushBlob(t *testing.T, client *http.Client, base, repo string, b blob) {
	t.Helper()
	if status, _ := registryCall(t, client, http.MethodHead, base+"/v2/"+repo+"/blobs/"+b.digest, "", nil); status == http.StatusOK {
		return
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v2/"+repo+"/blobs/uploads/", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || loc == "" {
		t.Fatalf("starting a blob upload to %s: HTTP %d", repo, resp.StatusCode)
	}
	if !strings.HasPrefix(loc, "http") {
		loc = base + loc
	}
	sep := "?"
	if strings.Contains(loc, "?") {
		sep = "&"
	}
	if status, body := registryCall(t, client, http.MethodPut, loc+sep+"digest="+b.digest, "application/octet-stream", b.data); status != http.StatusCreated {
		t.Fatalf("uploading %s to %s: HTTP %d %s", b.digest, repo, status, body)
	}
}

func registryCall(t *testing.T, client *http.Client, method, url, contentType string, body []byte) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("registry %s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(data))
}

// buildCritestHelpers compiles the static programs the images carry.
func buildCritestHelpers(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	bins := map[string][]byte{}
	for _, name := range []string{"pause", "webserver", "nonewprivs"} {
		out := filepath.Join(dir, name)
		if msg, err := exec.Command("gcc", "-static", "-O1", "-o", out, filepath.Join("testdata", "critest", name+".c")).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, msg)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		bins[name] = data
	}
	return bins
}
