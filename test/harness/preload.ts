// Loaded before every test file (bunfig.toml [test] preload): an afterAll at
// this level runs once, after the last file. bun test fires no process "exit"
// event, so the control planes that live for the whole run (sharedApiServer)
// are closed here; their processes also die with the test process by a
// parent-death signal, should it end some other way.

import { afterAll } from "bun:test";
import { closeAllApiServers } from "./kube-apiserver.ts";

afterAll(closeAllApiServers);
