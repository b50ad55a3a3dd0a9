package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/providers"
)

func init() { addCommand(newProvidersCmd) }

func newProvidersCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "providers [ID...]",
		Short: "List the providers, their settings and whether they are configured here",
		Long: `List every provider this berth knows: what it is, the settings the supervisor
reads for it from the environment (with their values here, or defaults),
the credentials each connection gives, and whether it is configured in this
environment: enabled (named by PROVIDERS or DEFAULT_PROVIDER, and local
wherever RELAY_URL is set) with every required setting set, as berth
supervisor would configure them. berth dev also turns on tunnel and, with
its own relay, local. Secret values are never printed.

For an enabled provider that can look at its backend, it also says what
it finds there: for docker, the runtime computers run under and why
(runsc when the engine lists it and SANDBOX_RUNTIME is unset).`,
		Example: "  berth providers\n  PROVIDERS=docker,e2b berth providers e2b",
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := providers.IDs()
			for _, a := range args {
				if !slices.Contains(ids, a) {
					return usagef("unknown provider %q (known: %s)", a, strings.Join(ids, ", "))
				}
			}
			if len(args) > 0 {
				ids = args
			}
			views := make([]providerView, 0, len(ids))
			for _, id := range ids {
				views = append(views, describeProvider(cmd.Context(), id, os.Getenv))
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, views)
			}
			return printProviders(cmd.OutOrStdout(), views)
		},
	}
}

// providerView is one provider as `berth providers` shows it.
type providerView struct {
	ID          string        `json:"id"`
	Summary     string        `json:"summary,omitempty"`
	Enabled     bool          `json:"enabled"`
	Default     bool          `json:"default"`
	Configured  bool          `json:"configured"`
	Missing     []string      `json:"missing,omitempty"`
	Settings    []settingView `json:"settings"`
	Credentials []settingView `json:"credentials"`
	Described   bool          `json:"described"`
	// Found is what an enabled provider finds in its backend (see
	// providers.Prober).
	Found []providers.Fact `json:"found,omitempty"`
}

type settingView struct {
	Name     string `json:"name"`
	Value    string `json:"value,omitempty"` // "" when unset or secret
	Set      bool   `json:"set"`
	Default  string `json:"default,omitempty"`
	Required bool   `json:"required"`
	Secret   bool   `json:"secret,omitempty"`
	Help     string `json:"help,omitempty"`
}

// enabledProviders returns the providers a supervisor started with this
// environment configures, and its default provider: those PROVIDERS
// names, DEFAULT_PROVIDER, and local wherever RELAY_URL names a relay.
func enabledProviders(getenv func(string) string) ([]string, string) {
	def := getenv("DEFAULT_PROVIDER")
	if def == "" {
		def = "docker"
	}
	var ids []string
	for _, id := range strings.Split(getenv("PROVIDERS"), ",") {
		if id = strings.TrimSpace(id); id != "" {
			ids = append(ids, id)
		}
	}
	if !slices.Contains(ids, def) {
		ids = append(ids, def)
	}
	if getenv("RELAY_URL") != "" && !slices.Contains(ids, "local") {
		// Lent machines are on wherever a relay is configured (SPEC 5).
		ids = append(ids, "local")
	}
	return ids, def
}

// probeTimeout bounds what `berth providers` asks one provider's backend.
const probeTimeout = 10 * time.Second

func describeProvider(ctx context.Context, id string, getenv func(string) string) providerView {
	enabled, def := enabledProviders(getenv)
	v := providerView{ID: id, Enabled: slices.Contains(enabled, id), Default: id == def, Settings: []settingView{}, Credentials: []settingView{}}
	d, ok := providers.DescriptionOf(id)
	v.Described = ok
	v.Summary = d.Summary
	for _, s := range d.Settings {
		sv := settingView{Name: s.Name, Default: s.Default, Required: s.Required, Secret: s.Secret, Help: s.Help}
		if val := getenv(s.Name); val != "" {
			sv.Set = true
			if !s.Secret {
				sv.Value = val
			}
		}
		v.Settings = append(v.Settings, sv)
	}
	for _, s := range d.Credentials {
		v.Credentials = append(v.Credentials, settingView{Name: s.Name, Default: s.Default, Required: s.Required, Secret: s.Secret, Help: s.Help})
	}
	v.Missing = d.Missing(getenv)
	v.Configured = v.Enabled && len(v.Missing) == 0
	if v.Configured {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		v.Found, _ = providers.Probe(ctx, id, providers.Config{Getenv: getenv})
		cancel()
	}
	return v
}

func printProviders(w io.Writer, views []providerView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tCONFIGURED\tSUMMARY")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.ID, configuredText(v), v.Summary)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range views {
		fmt.Fprintf(w, "\n%s", v.ID)
		if v.Default {
			fmt.Fprint(w, " (DEFAULT_PROVIDER)")
		}
		fmt.Fprintln(w)
		for _, f := range v.Found {
			fmt.Fprintf(w, "  %s: %s\n", f.Name, f.Value)
		}
		if !v.Described {
			fmt.Fprintln(w, "  describes no settings")
			continue
		}
		if err := printSettings(w, "settings", "", v.Settings, settingValue); err != nil {
			return err
		}
		if err := printSettings(w, "credentials", " (each connection)", v.Credentials, credentialText); err != nil {
			return err
		}
	}
	return nil
}

// printSettings prints one block of settings headed name (and note), each
// with what text says of it and its help, or "none".
func printSettings(w io.Writer, name, note string, ss []settingView, text func(settingView) string) error {
	if len(ss) == 0 {
		_, err := fmt.Fprintf(w, "  %s: none\n", name)
		return err
	}
	fmt.Fprintf(w, "  %s%s:\n", name, note)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range ss {
		fmt.Fprintf(tw, "    %s\t%s\t%s\n", s.Name, text(s), s.Help)
	}
	return tw.Flush()
}

func configuredText(v providerView) string {
	switch {
	case v.Enabled && len(v.Missing) == 0:
		return "yes"
	case v.Enabled:
		return "no: set " + strings.Join(v.Missing, ", ")
	case len(v.Missing) > 0:
		return "no: not in PROVIDERS; set " + strings.Join(v.Missing, ", ")
	default:
		return "no: not in PROVIDERS"
	}
}

func settingValue(s settingView) string {
	switch {
	case s.Set && s.Secret:
		return "(set)"
	case s.Set:
		return s.Value
	case s.Required:
		return "(unset, required)"
	case s.Default != "":
		return s.Default + " (default)"
	default:
		return "(unset)"
	}
}

func credentialText(s settingView) string {
	var parts []string
	if s.Required {
		parts = append(parts, "required")
	} else {
		parts = append(parts, "optional")
	}
	if s.Secret {
		parts = append(parts, "secret")
	}
	if s.Default != "" {
		parts = append(parts, "default "+s.Default)
	}
	return strings.Join(parts, ", ")
}
