package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/api"
)

func init() { addSubcommand("computer", newBrowseCmd) }

func newBrowseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "browse",
		Short: "Drive the browser of the agent's computer",
		Long: `browse runs one browser tool on the agent's running computer: the
computer's own Chromium (started on the first call and kept for the
session) or the hosted browser of a browser session. Read the page with
snapshot; act on its elements by the refs it prints (e12).`,
		Example: `  berth computer browse --agent a1 navigate https://example.com
  berth computer browse --agent a1 snapshot
  berth computer browse --agent a1 type e14 'hello' --submit
  berth computer browse --agent a1 screenshot --out page.png`,
	}
	page := func(p *api.BrowserPage) string { return fmt.Sprintf("tab %d: %s (%s)", p.Tab, p.Title, p.URL) }
	pageCmd := func(use, short string, args cobra.PositionalArgs, req func(cmd *cobra.Command, args []string) (string, any, error)) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: args, RunE: func(cmd *cobra.Command, args []string) error {
			tool, in, err := req(cmd, args)
			if err != nil {
				return err
			}
			return browse(cmd, tool, in, page)
		}}
	}

	nav := pageCmd("navigate URL", "Load a URL (or back, forward, reload) in the selected tab", cobra.ExactArgs(1),
		func(cmd *cobra.Command, args []string) (string, any, error) {
			return "navigate", api.BrowserNavigateRequest{URL: args[0], TimeoutMS: intFlag(cmd, "timeout-ms")}, nil
		})
	nav.Flags().Int("timeout-ms", 0, "wait at most this long for the load (default 30000)")

	click := pageCmd("click REF", "Click an element", cobra.ExactArgs(1),
		func(cmd *cobra.Command, args []string) (string, any, error) {
			b, _ := cmd.Flags().GetString("button")
			return "click", api.BrowserClickRequest{Ref: args[0], Button: b, Clicks: intFlag(cmd, "clicks")}, nil
		})
	click.Flags().String("button", "", "left (default), right or middle")
	click.Flags().Int("clicks", 0, "2 for a double click, 3 for a triple click")

	typ := pageCmd("type REF TEXT", "Type text into an element", cobra.ExactArgs(2),
		func(cmd *cobra.Command, args []string) (string, any, error) {
			clear, _ := cmd.Flags().GetBool("clear")
			submit, _ := cmd.Flags().GetBool("submit")
			return "type", api.BrowserTypeRequest{Ref: args[0], Text: args[1], Clear: clear, Submit: submit}, nil
		})
	typ.Flags().Bool("clear", false, "empty the field first")
	typ.Flags().Bool("submit", false, "press Enter after the text")

	press := pageCmd("press KEY", "Press a key or combination (Enter, Control+a)", cobra.ExactArgs(1),
		func(cmd *cobra.Command, args []string) (string, any, error) {
			ref, _ := cmd.Flags().GetString("ref")
			return "press", api.BrowserPressRequest{Key: args[0], Ref: ref}, nil
		})
	press.Flags().String("ref", "", "focus this element first")

	scroll := pageCmd("scroll", "Scroll an element into view, or the page by pixels", cobra.NoArgs,
		func(cmd *cobra.Command, args []string) (string, any, error) {
			ref, _ := cmd.Flags().GetString("ref")
			return "scroll", api.BrowserScrollRequest{Ref: ref, DeltaX: intFlag(cmd, "dx"), DeltaY: intFlag(cmd, "dy")}, nil
		})
	scroll.Flags().String("ref", "", "the element to scroll into view")
	scroll.Flags().Int("dx", 0, "pixels to the right")
	scroll.Flags().Int("dy", 0, "pixels down")

	wait := pageCmd("wait-for", "Wait for text to appear or go, or for a time", cobra.NoArgs,
		func(cmd *cobra.Command, args []string) (string, any, error) {
			text, _ := cmd.Flags().GetString("text")
			gone, _ := cmd.Flags().GetString("text-gone")
			return "wait_for", api.BrowserWaitRequest{Text: text, TextGone: gone, TimeoutMS: intFlag(cmd, "timeout-ms")}, nil
		})
	wait.Flags().String("text", "", "wait until this text appears")
	wait.Flags().String("text-gone", "", "wait until this text is gone")
	wait.Flags().Int("timeout-ms", 0, "wait at most this long (default 30000)")

	snap := &cobra.Command{Use: "snapshot", Short: "Print the page's accessibility tree with element refs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return browse(cmd, "snapshot", api.BrowserSnapshotRequest{MaxBytes: intFlag(cmd, "max-bytes")}, func(s *api.BrowserSnapshot) string {
				out := page(&s.BrowserPage) + "\n" + strings.TrimRight(s.Tree, "\n")
				if s.Truncated {
					out += "\n(cut at --max-bytes)"
				}
				return out
			})
		}}
	snap.Flags().Int("max-bytes", 0, "bytes of tree at most (default 65536)")

	shot := &cobra.Command{Use: "screenshot", Short: "Save an image of the page", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			out, _ := cmd.Flags().GetString("out")
			if out == "" {
				return usagef("--out: required, the file to write the image to")
			}
			format, _ := cmd.Flags().GetString("format")
			full, _ := cmd.Flags().GetBool("full-page")
			ref, _ := cmd.Flags().GetString("ref")
			req := api.BrowserScreenshotRequest{Format: format, Quality: intFlag(cmd, "quality"), FullPage: full, Ref: ref}
			c, agent, err := agentCmd(cmd)
			if err != nil {
				return err
			}
			var s api.BrowserScreenshot
			if err := c.Browser(cmd.Context(), agent, "screenshot", req, &s); err != nil {
				return err
			}
			if err := os.WriteFile(out, s.Data, 0o644); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: %dx%d %s\n", out, s.Width, s.Height, s.Format)
			return err
		}}
	shot.Flags().String("out", "", "the file to write (required)")
	shot.Flags().String("format", "", "png (default) or jpeg")
	shot.Flags().Int("quality", 0, "jpeg quality 1-100")
	shot.Flags().Bool("full-page", false, "the whole page, not only the viewport")
	shot.Flags().String("ref", "", "only this element")

	tabs := &cobra.Command{Use: "tabs [list | open [URL] | select INDEX | close INDEX]", Short: "List, open, select or close tabs",
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.BrowserTabsRequest{Action: "list"}
			if len(args) > 0 {
				req.Action = args[0]
			}
			switch req.Action {
			case "list":
				if len(args) > 1 {
					return usagef("tabs list takes nothing more")
				}
			case "open":
				if len(args) > 1 {
					req.URL = args[1]
				}
			case "select", "close":
				if len(args) != 2 {
					return usagef("tabs %s INDEX: the tab's index from tabs list", req.Action)
				}
				n, err := strconv.Atoi(args[1])
				if err != nil || n < 0 {
					return usagef("INDEX %q: want a tab's index from tabs list", args[1])
				}
				req.Index = n
			default:
				return usagef("tabs %q: want list, open, select or close", req.Action)
			}
			return browse(cmd, "tabs", req, func(t *api.BrowserTabs) string {
				var b strings.Builder
				for _, tab := range t.Tabs {
					mark := " "
					if tab.Index == t.Selected {
						mark = "*"
					}
					fmt.Fprintf(&b, "%s %d  %s (%s)\n", mark, tab.Index, tab.Title, tab.URL)
				}
				return strings.TrimRight(b.String(), "\n")
			})
		}}

	eval := &cobra.Command{Use: "evaluate EXPRESSION", Short: "Run JavaScript in the page and print its value (connections with browserEvaluate)",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return browse(cmd, "evaluate", api.BrowserEvaluateRequest{Expression: args[0]}, func(e *api.BrowserEvaluation) string { return string(e.Value) })
		}}

	cmd.AddCommand(nav, snap, click, typ, press, scroll, shot, tabs, wait, eval)
	return cmd
}

// browse calls one browser tool and prints its answer as text, or as the
// supervisor's JSON with --json.
func browse[T any](cmd *cobra.Command, tool string, in any, text func(*T) string) error {
	agent, err := agentOf(cmd)
	if err != nil {
		return err
	}
	return printed(cmd, func(ctx context.Context, c *api.Client) (*T, error) {
		out := new(T)
		return out, c.Browser(ctx, agent, tool, in, out)
	}, func(v *T) error {
		_, err := fmt.Fprintln(cmd.OutOrStdout(), text(v))
		return err
	})
}

func intFlag(cmd *cobra.Command, name string) int {
	n, _ := cmd.Flags().GetInt(name)
	return n
}
