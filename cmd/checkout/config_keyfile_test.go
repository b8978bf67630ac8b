package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// checkout config shows the settings when the profile's key_file cannot be
// read, naming the file and why, as it shows a malformed agent: it failed
// with the error alone, so the command that explains the settings could
// not be used on the one that was wrong. Commands that send requests still
// refuse to run without the key.
func TestConfigShowsAKeyFileItCannotRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "config.toml"), "default_profile = \"a\"\n[profiles.a]\nurl = \"http://127.0.0.1:1\"\nkey_file = \"missing.key\"\nagent = \"agent-a1b2\"\n")
	env := []string{"CHECKOUT_CONFIG=" + filepath.Join(dir, "config.toml")}
	missing := filepath.Join(dir, "missing.key")
	r := runCLIEnv(t, env, "config")
	if r.code != 0 || !strings.Contains(r.stdout, "Profile: a") || !strings.Contains(r.stdout, missing) || !strings.Contains(r.stdout, "cannot read") {
		t.Errorf("config with an unreadable key_file: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = runCLIEnv(t, env, "config", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, "cannot read") {
		t.Errorf("config --json with an unreadable key_file: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = runCLIEnv(t, env, "list")
	if r.code != exitUsage || !strings.Contains(r.stderr, "profile a: cannot read key_file") {
		t.Errorf("list with an unreadable key_file: exit %d\nstderr: %s", r.code, r.stderr)
	}
}
