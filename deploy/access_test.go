package deploy

import (
	"slices"
	"testing"

	"github.com/checkout-dev/checkout/lease/schema"
)

// Every function that works on today's tasks table of its own accord waits
// for the migration of an earlier one, and exactly those may read the
// earlier table's marker: the stream readers (the stream and notices
// functions) only follow changes made.
func TestFunctionsOnTheTasksTableAwaitTheMigration(t *testing.T) {
	for _, fn := range Functions {
		onTasks, marker := false, false
		for _, g := range Grants[fn] {
			switch g.Table {
			case schema.TasksTable:
				onTasks = len(g.Actions) > 0 && !slices.Equal(g.Actions, []string{"DescribeTable"}) || len(g.QueryIndexes) > 0
			case schema.TasksTableV1:
				marker = slices.Equal(g.Actions, []string{"GetItem"}) && len(g.QueryIndexes) == 0
				if !marker {
					t.Errorf("%s: the earlier tasks table is granted %v %v, want GetItem alone", fn, g.Actions, g.QueryIndexes)
				}
			}
		}
		want := onTasks && !StreamReaders[fn]
		if AwaitsMigration[fn] != want {
			t.Errorf("%s: AwaitsMigration %v, want %v (it works on %s: %v)", fn, AwaitsMigration[fn], want, schema.TasksTable, onTasks)
		}
		if marker != (AwaitsMigration[fn] || fn == Health) {
			t.Errorf("%s: GetItem on %s granted %v, AwaitsMigration %v", fn, schema.TasksTableV1, marker, AwaitsMigration[fn])
		}
	}
}
