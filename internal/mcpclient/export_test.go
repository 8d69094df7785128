package mcpclient

// SetSDKCalls makes tools/call go through the SDK on every session (true)
// or directly on Streamable HTTP ones (false, the default).
func SetSDKCalls(on bool) { sdkCalls = on }
