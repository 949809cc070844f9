// CI runs the suite twice: on the embedded PostgreSQL, then with TEST_SERVER_PASS=1 on another
// server version at TEST_DATABASE_URL (.ci/run). A slow test that never uses that server (it
// starts an embedded one of its own, replays the Dockerfile, or needs no database) would only
// repeat the first pass, so it skips itself in the second: `describe.skipIf(serverPass)`.
export const serverPass = process.env.TEST_SERVER_PASS === '1';
