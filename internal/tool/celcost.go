package tool

import (
	"math"

	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// dynCostEstimator prices the calls that cel-go could not bind to one
// overload when the rule was checked. Every value under args is dyn, so
// `args.a + args.b` is dispatched at run time, and cel-go's default cost
// tracker then charges 1 for it whatever the sizes: without this, a rule could
// concatenate megabyte strings, quadratically, under any cost limit (and
// outside a comprehension, where DecideTimeout cannot interrupt it). The
// prices mirror cel-go's defaults for the size-dependent overloads
// (interpreter/runtimecost.go), chosen by function name and actual operands.
type dynCostEstimator struct{}

// CallCost implements interpreter.ActualCostEstimator. nil means "use
// cel-go's default price".
func (dynCostEstimator) CallCost(function, overloadID string, args []ref.Val, _ ref.Val) *uint64 {
	if overloadID != "" {
		return nil
	}
	var cost uint64
	switch function {
	case operators.Add:
		if len(args) != 2 || !isText(args[0]) || !isText(args[1]) {
			return nil // numbers: O(1); lists: concatenated lazily in O(1)
		}
		cost = traversal(valueSize(args[0]) + valueSize(args[1]))
	case operators.Equals, operators.NotEquals,
		operators.Less, operators.LessEquals, operators.Greater, operators.GreaterEquals:
		if len(args) != 2 {
			return nil
		}
		cost = traversal(min(valueSize(args[0]), valueSize(args[1])))
	case overloads.StartsWith, overloads.EndsWith:
		if len(args) != 2 {
			return nil
		}
		cost = traversal(valueSize(args[0]))
	case overloads.Contains:
		if len(args) != 2 {
			return nil
		}
		cost = traversal(valueSize(args[0])) * traversal(valueSize(args[1]))
	case overloads.Matches:
		if len(args) != 2 {
			return nil
		}
		cost = traversal(1+valueSize(args[0])) *
			uint64(math.Ceil(float64(valueSize(args[1]))*common.RegexStringLengthCostFactor))
	case operators.In:
		if len(args) != 2 {
			return nil
		}
		cost = valueSize(args[1])
	default:
		return nil
	}
	return &cost
}

func isText(v ref.Val) bool {
	switch v.(type) {
	case types.String, types.Bytes:
		return true
	}
	return false
}

// valueSize is cel-go's notion of size: characters, bytes or elements, and 1
// for anything without a size.
func valueSize(v ref.Val) uint64 {
	if s, ok := v.(traits.Sizer); ok {
		if n, ok := s.Size().(types.Int); ok && n > 0 {
			return uint64(n)
		}
	}
	return 1
}

func traversal(size uint64) uint64 {
	return uint64(math.Ceil(float64(size) * common.StringTraversalCostFactor))
}
