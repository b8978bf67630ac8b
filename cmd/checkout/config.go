package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/lease"
)

// The profile file lets one host run many agent identities: each profile
// names a server, a file holding an API key, and the agent the profile acts
// as. Keys live in their own files (mode 0600), never in the profile file.
//
//	default_profile = "researcher"
//
//	[profiles.researcher]
//	url      = "http://127.0.0.1:3100"
//	key_file = "researcher.key"   # relative to this file's folder, or ~/...
//	agent    = "agent-a1b2"

// configFile is the profile file's contents.
type configFile struct {
	DefaultProfile string             `toml:"default_profile"`
	Profiles       map[string]profile `toml:"profiles"`
}

type profile struct {
	URL     string `toml:"url" json:"url,omitempty"`
	KeyFile string `toml:"key_file" json:"key_file,omitempty"`
	Agent   string `toml:"agent" json:"agent,omitempty"`
}

// configPath is where the profile file is: CHECKOUT_CONFIG, or
// config.toml in $XDG_CONFIG_HOME/checkout (default ~/.config/checkout).
func configPath() string {
	if p := os.Getenv("CHECKOUT_CONFIG"); p != "" {
		return p
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" && runtime.GOOS == "windows" {
		dir, _ = os.UserConfigDir()
	}
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "checkout", "config.toml")
}

// loadConfig reads the profile file at path; a missing file is an empty
// configuration.
func loadConfig(path string) (configFile, bool, error) {
	var cf configFile
	if path == "" {
		return cf, false, nil
	}
	md, err := toml.DecodeFile(path, &cf)
	if errors.Is(err, fs.ErrNotExist) {
		return cf, false, nil
	}
	if err != nil {
		return cf, true, &usageError{fmt.Sprintf("%s: %v", path, err)}
	}
	if extra := md.Undecoded(); len(extra) > 0 {
		return cf, true, &usageError{fmt.Sprintf("%s: unknown setting %s (a profile has url, key_file and agent)", path, extra[0])}
	}
	if cf.DefaultProfile != "" {
		if _, ok := cf.Profiles[cf.DefaultProfile]; !ok {
			return cf, true, &usageError{fmt.Sprintf("%s: default_profile %q is not a profile", path, cf.DefaultProfile)}
		}
	}
	return cf, true, nil
}

// setting is one resolved value and where it came from.
type setting struct {
	value, from string
}

// settings are what a command runs with, after flags, the chosen profile,
// the environment and the defaults have been weighed.
type settings struct {
	configPath  string
	configFound bool
	config      configFile
	profile     setting // the profile in use, if any
	url         setting
	key         setting
	agent       setting
	runID       setting
	// keyErr is why the profile's key_file could not be read: checkout
	// config shows it, and every command that needs the key fails with it.
	keyErr error
}

// resolve weighs, for each setting, in this order: the flag; a profile
// chosen by --profile or CHECKOUT_PROFILE; the environment variable; the
// file's default_profile; the built-in default. A profile chosen by name
// beats the environment, so that an agent started with --profile is that
// agent even in a shell that exports another key.
func (a *app) resolve() (*settings, error) {
	if a.resolved != nil {
		return a.resolved, nil
	}
	s := &settings{configPath: configPath()}
	var err error
	s.config, s.configFound, err = loadConfig(s.configPath)
	if err != nil {
		return nil, err
	}
	name, from := a.profileName, "--profile"
	if name == "" {
		name, from = os.Getenv("CHECKOUT_PROFILE"), "CHECKOUT_PROFILE"
	}
	explicit := name != ""
	if !explicit && s.config.DefaultProfile != "" {
		name, from = s.config.DefaultProfile, "default_profile in "+s.configPath
	}
	var prof *profile
	if name != "" {
		p, ok := s.config.Profiles[name]
		if !ok {
			if !s.configFound {
				return nil, &usageError{fmt.Sprintf("no profile %q: %s does not exist (see checkout config --help)", name, s.configPath)}
			}
			return nil, &usageError{fmt.Sprintf("no profile %q in %s (profiles: %s)", name, s.configPath, strings.Join(profileNames(s.config), ", "))}
		}
		prof = &p
		s.profile = setting{name, from}
	}
	fromProfile := "profile " + name
	pick := func(flag, flagName string, fromProf string, env string) setting {
		switch {
		case flag != "":
			return setting{flag, flagName}
		case explicit && fromProf != "":
			return setting{fromProf, fromProfile}
		case env != "" && os.Getenv(env) != "":
			return setting{os.Getenv(env), env}
		case fromProf != "":
			return setting{fromProf, fromProfile}
		}
		return setting{}
	}
	var pURL, pKeyFile, pAgent string
	if prof != nil {
		pURL, pKeyFile, pAgent = prof.URL, prof.KeyFile, prof.Agent
	}
	s.url = pick(a.flagURL, "--url", pURL, "CHECKOUT_URL")
	if s.url.value == "" {
		s.url = setting{defaultURL, "default"}
	}
	s.runID = pick(a.runIDOpt, "--run-id", "", "CHECKOUT_RUN_ID")
	s.key = pick(a.flagKey, "--api-key", "", "CHECKOUT_API_KEY")
	keyFromProfile := false
	if pKeyFile != "" && (s.key.value == "" || explicit && a.flagKey == "") {
		path := keyPath(s.configPath, pKeyFile)
		b, err := os.ReadFile(path)
		if err != nil {
			s.keyErr = &usageError{fmt.Sprintf("profile %s: cannot read key_file: %v", name, err)}
			s.key = setting{}
		} else {
			s.key, keyFromProfile = setting{strings.TrimSpace(string(b)), "key file " + path}, true
		}
	}
	// The profile's agent goes with the profile's key: with a key from
	// elsewhere it would name another agent than the key's.
	switch {
	case a.agentOpt != "":
		s.agent = setting{a.agentOpt, "--agent"}
	case keyFromProfile && pAgent != "":
		s.agent = setting{pAgent, fromProfile}
	case !keyFromProfile && os.Getenv("CHECKOUT_AGENT") != "":
		s.agent = setting{os.Getenv("CHECKOUT_AGENT"), "CHECKOUT_AGENT"}
	}
	a.resolved = s
	return s, nil
}

// checkAgent checks the agent the command acts as before any request names
// it: the server answers a non-admin naming an agent 403 before it looks
// at the id.
func checkAgent(a setting) error {
	if a.value != "" && !lease.ValidID(a.value) {
		return &usageError{fmt.Sprintf("invalid agent id %q (from %s): an id is 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit", a.value, a.from)}
	}
	return nil
}

// checkRunID checks the run id the command acts under, naming where it came
// from: the server's run_id error cannot say that CHECKOUT_RUN_ID was set.
func checkRunID(r setting) error {
	if r.value != "" && !lease.ValidID(r.value) {
		return &usageError{fmt.Sprintf("invalid run id %q (from %s): a run id is 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit", r.value, r.from)}
	}
	return nil
}

// checkKey refuses a key no request can carry: a control character (a
// newline copied along with it, say) would fail every request as Go's
// "invalid header field value", which read like an unreachable server.
func checkKey(k setting) error {
	if strings.ContainsFunc(k.value, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return &usageError{fmt.Sprintf("invalid API key (from %s): it contains a control character, such as a newline copied with it", k.from)}
	}
	return nil
}

// checkURL checks the server URL before any request is made to it: an
// absolute http or https URL with a host, as client.CheckBaseURL asks. A
// wrong one is a usage error that says what the client's error says, and
// where the URL came from.
func checkURL(u setting) error {
	if client.CheckBaseURL(u.value) != nil {
		return &usageError{fmt.Sprintf("server URL %q (from %s) is not an absolute http:// or https:// URL: want http://HOST[:PORT] or https://...", u.value, u.from)}
	}
	return nil
}

// keyPath is a key_file resolved: ~/ is the home directory, and a relative
// path is relative to the profile file's folder.
func keyPath(configPath, p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(configPath), p)
}

func profileNames(cf configFile) []string {
	names := make([]string, 0, len(cf.Profiles))
	for n := range cf.Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// mask shows enough of a key to tell keys apart, never enough to use one.
func mask(key string) string {
	switch {
	case key == "":
		return ""
	case len(key) < 16:
		return "****"
	}
	return key[:3] + "…" + key[len(key)-4:]
}

func (a *app) configCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Show the profile file and the settings in use (the key masked)",
		Long: `Shows where the settings of this command line come from, with the API key
masked, and the profiles of the profile file.

The profile file is ` + "`$XDG_CONFIG_HOME/checkout/config.toml`" + ` (default
~/.config/checkout/config.toml; CHECKOUT_CONFIG names another). Each profile
names a server, a file that holds an API key, and the agent it acts as, so
that one host can run many agent identities:

  default_profile = "researcher"

  [profiles.researcher]
  url      = "http://127.0.0.1:3100"
  key_file = "researcher.key"   # relative to the file's folder, or ~/...
  agent    = "agent-a1b2"

  [profiles.writer]
  url      = "http://127.0.0.1:3100"
  key_file = "~/.secrets/writer.key"

Pick one with --profile NAME or CHECKOUT_PROFILE=NAME. The URL and the key
are taken from, in order: the flag (--url, --api-key); the profile chosen
by --profile or CHECKOUT_PROFILE; the environment (CHECKOUT_URL,
CHECKOUT_API_KEY); the file's default_profile; the built-in default. The
agent is --agent, else the profile's agent when the key is the profile's,
else (with a key not from a profile) CHECKOUT_AGENT, else the key's own
agent: a profile's key goes with its own agent only. Keys are never shown: the
key_file's contents appear here masked.`,
		Example: `  checkout config
  checkout config --profile writer
  CHECKOUT_PROFILE=writer checkout config --json`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := a.resolve()
			if err != nil {
				return err
			}
			if a.json {
				return printConfigJSON(a.stdout, s)
			}
			printConfig(a.stdout, s)
			return nil
		},
	}
}

func orNone(s setting) (string, string) {
	if s.value == "" {
		return "-", ""
	}
	return s.value, " (" + s.from + ")"
}

func printConfig(w io.Writer, s *settings) {
	found := ""
	if !s.configFound {
		found = " (does not exist)"
	}
	fmt.Fprintf(w, "Config file: %s%s\n", s.configPath, found)
	if s.profile.value != "" {
		fmt.Fprintf(w, "Profile: %s (%s)\n", s.profile.value, s.profile.from)
	} else {
		fmt.Fprintln(w, "Profile: none")
	}
	fmt.Fprintln(w)
	line := func(label string, st setting, shown string) {
		v, from := orNone(st)
		if st.value != "" && shown != "" {
			v = shown
		}
		fmt.Fprintf(w, "  %-9s %s%s\n", label+":", v, from)
	}
	line("URL", s.url, "")
	if s.keyErr != nil {
		fmt.Fprintf(w, "  %-9s - (%s)\n", "API key:", s.keyErr)
	} else {
		line("API key", s.key, mask(s.key.value))
	}
	line("Agent", s.agent, "")
	line("Run id", s.runID, "")
	if len(s.config.Profiles) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Profiles")
	fmt.Fprintln(w)
	rows := [][]string{}
	for _, n := range profileNames(s.config) {
		p := s.config.Profiles[n]
		mark := n
		if n == s.profile.value {
			mark = "* " + n
		}
		rows = append(rows, []string{mark, orDash(p.URL), orDash(p.Agent), orDash(p.KeyFile)})
	}
	table(w, []string{"Profile", "URL", "Agent", "Key File"}, rows)
}

func printConfigJSON(w io.Writer, s *settings) error {
	type val struct {
		Value string `json:"value"`
		From  string `json:"from"`
	}
	v := func(st setting) *val {
		if st.value == "" {
			return nil
		}
		return &val{st.value, st.from}
	}
	key := v(s.key)
	if key != nil {
		key.Value = mask(key.Value)
	}
	out := struct {
		ConfigFile string             `json:"config_file"`
		Exists     bool               `json:"exists"`
		Profile    *val               `json:"profile"`
		URL        *val               `json:"url"`
		APIKey     *val               `json:"api_key"`
		Agent      *val               `json:"agent"`
		RunID      *val               `json:"run_id"`
		Profiles   map[string]profile `json:"profiles"`
		KeyError   string             `json:"api_key_error,omitempty"`
	}{s.configPath, s.configFound, v(s.profile), v(s.url), key, v(s.agent), v(s.runID), s.config.Profiles, ""}
	if s.keyErr != nil {
		out.KeyError = s.keyErr.Error()
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\n", b)
	return nil
}
