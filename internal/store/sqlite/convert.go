package sqlite

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// convertAssign stores src, a value the driver returned (int64, float64,
// bool, []byte, string, time.Time or nil), in dest, as database/sql's
// Scan does for the destinations the store scans into: a sql.Scanner,
// pointers to string, []byte (json.RawMessage too), integers, floats,
// bool, any, and named types of those kinds. Bytes are copied: the
// driver's may be reused by its next row.
func convertAssign(dest, src any) error {
	switch d := dest.(type) {
	case sql.Scanner:
		return d.Scan(src)
	case *string:
		switch s := src.(type) {
		case string:
			*d = s
			return nil
		case []byte:
			*d = string(s)
			return nil
		case nil:
			return errors.New("converting NULL to string is unsupported")
		}
	case *[]byte:
		switch s := src.(type) {
		case nil:
			*d = nil
			return nil
		case []byte:
			*d = append([]byte(nil), s...)
			return nil
		case string:
			*d = []byte(s)
			return nil
		}
	case *int64:
		if n, ok := src.(int64); ok {
			*d = n
			return nil
		}
	case *any:
		if b, ok := src.([]byte); ok {
			src = append([]byte(nil), b...)
		}
		*d = src
		return nil
	}
	return convertReflect(dest, src)
}

// convertReflect is convertAssign for the rest: destinations by kind.
func convertReflect(dest, src any) error {
	dp := reflect.ValueOf(dest)
	if dp.Kind() != reflect.Pointer || dp.IsNil() {
		return fmt.Errorf("destination not a pointer: %T", dest)
	}
	if src == nil {
		return fmt.Errorf("converting NULL to %s is unsupported", dp.Elem().Kind())
	}
	dv := dp.Elem()
	switch dv.Kind() {
	case reflect.String:
		switch s := src.(type) {
		case string:
			dv.SetString(s)
		case []byte:
			dv.SetString(string(s))
		case int64:
			dv.SetString(strconv.FormatInt(s, 10))
		case float64:
			dv.SetString(strconv.FormatFloat(s, 'g', -1, 64))
		case bool:
			dv.SetString(strconv.FormatBool(s))
		case time.Time:
			dv.SetString(s.Format(time.RFC3339Nano))
		default:
			return fmt.Errorf("converting %T to %s is unsupported", src, dv.Type())
		}
		return nil
	case reflect.Slice:
		if dv.Type().Elem().Kind() != reflect.Uint8 {
			break
		}
		switch s := src.(type) {
		case []byte:
			dv.SetBytes(append([]byte(nil), s...))
		case string:
			dv.SetBytes([]byte(s))
		default:
			return fmt.Errorf("converting %T to %s is unsupported", src, dv.Type())
		}
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := asInt(src)
		if err != nil {
			return err
		}
		if dv.OverflowInt(n) {
			return fmt.Errorf("value %d overflows %s", n, dv.Type())
		}
		dv.SetInt(n)
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := asInt(src)
		if err != nil {
			return err
		}
		if n < 0 || dv.OverflowUint(uint64(n)) {
			return fmt.Errorf("value %d overflows %s", n, dv.Type())
		}
		dv.SetUint(uint64(n))
		return nil
	case reflect.Float32, reflect.Float64:
		switch s := src.(type) {
		case float64:
			dv.SetFloat(s)
		case int64:
			dv.SetFloat(float64(s))
		default:
			f, err := strconv.ParseFloat(asString(src), 64)
			if err != nil {
				return fmt.Errorf("converting %T to %s: %w", src, dv.Type(), err)
			}
			dv.SetFloat(f)
		}
		return nil
	case reflect.Bool:
		b, err := driver.Bool.ConvertValue(src)
		if err != nil {
			return err
		}
		dv.SetBool(b.(bool))
		return nil
	}
	return fmt.Errorf("unsupported Scan, storing driver.Value type %T into type %T", src, dest)
}

func asInt(src any) (int64, error) {
	switch s := src.(type) {
	case int64:
		return s, nil
	case bool:
		if s {
			return 1, nil
		}
		return 0, nil
	}
	n, err := strconv.ParseInt(asString(src), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("converting %T to an integer: %w", src, err)
	}
	return n, nil
}

func asString(src any) string {
	switch s := src.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return fmt.Sprint(src)
}
