// Package deploytest checks the deployment docs against the real programs:
// the nginx blocks of docs/deployment.md, taken from the file as they are,
// run by Debian's nginx over render's real output (every file served with
// its type, nothing else; basic auth and an OAuth2 proxy in front).
//
// The package has no code outside its tests. Without /usr/sbin/nginx, or
// run as a user other than root, the tests skip, except under CI=true,
// where they fail (.ci/run installs nginx-light).
package deploytest
