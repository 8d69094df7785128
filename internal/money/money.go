// Package money rounds the costs agentplane reports, so sums of prices
// read as the decimals they are (0.000034, not 0.00003399999999999999).
package money

import "math"

// Round rounds a cost to 1e-9 of its currency unit (a nano-dollar): far
// below any price per token, and exact to print. A float64 is shown by
// encoding/json in its shortest form, which for n/1e9 is the decimal n·10⁻⁹.
func Round(cost float64) float64 {
	return math.Round(cost*1e9) / 1e9
}
