package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func TestDesktopCoordinates(t *testing.T) {
	c, err := toScreen("coordinate", []int{512, 288}, 0.8)
	if err != nil || fmt.Sprint(c) != "[640 360]" {
		t.Fatalf("toScreen: %v %v", c, err)
	}
	if c := fromScreen([]int{640, 360}, 0.8); fmt.Sprint(c) != "[512 288]" {
		t.Fatalf("fromScreen: %v", c)
	}
	if _, err := toScreen("coordinate", []int{1}, 1); err == nil || !strings.Contains(err.Error(), "[x, y]") {
		t.Fatalf("one number: %v", err)
	}
	if m := modifiers("ctrl+shift"); fmt.Sprint(m) != "[ctrl shift]" {
		t.Fatalf("modifiers: %v", m)
	}
}

func TestDesktopActionArguments(t *testing.T) {
	s := New(nil, "a1")
	ctx := context.Background()
	d := 31.0
	for _, c := range []struct {
		in   actionInput
		want string
	}{
		{actionInput{Action: "fly"}, `"fly" is not one of`},
		{actionInput{}, "action: required"},
		{actionInput{Action: "mouse_move"}, "coordinate: required"},
		{actionInput{Action: "wait", Duration: &d}, "outside 0..30"},
		{actionInput{Action: "wait"}, "duration: required"},
		{actionInput{Action: "type"}, "text: required"},
		{actionInput{Action: "type", Text: strings.Repeat("x", MaxTypeChars+1)}, "10001 characters, at most 10000"},
		{actionInput{Action: "scroll"}, "scroll_direction: required"},
		{actionInput{Action: "left_click", StartCoordinate: []int{1, 1}}, "left_click_drag only"},
		{actionInput{Action: "left_click", Scale: new(2.0)}, "scale"},
	} {
		_, _, err := s.action(ctx, c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.in, err, c.want)
		}
	}
}
