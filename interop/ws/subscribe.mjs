#!/usr/bin/env node
// A `/agents/ws` subscriber that behaves like the Seed desktop app's client, built only from the
// published TypeScript client library (`@seed-hypermedia/client`) and the `ws` package:
//
// - the key pair comes from a 32-byte Ed25519 seed through the library (`nobleKeyPairFromSeed`);
// - each `Subscribe` is signed the way the desktop signs an agents action: an `AgentsAction` blob
//   with the signer's principal, 64 zero bytes of signature, the account (parsed back from its
//   string), and the action with undefined members left out and `ts: Date.now()`; `protocol` is
//   absent unless `--protocol` is given (the server then reads protocol 1);
// - the envelope is `cbor.encode`d and sent as a binary frame (or, with `--text`, as a text frame
//   holding a JSON array of the byte values, the other form the server accepts);
// - every frame received is `JSON.parse`d, as the desktop does, and printed as one JSON line on
//   stdout. Nothing else goes to stdout; notes go to stderr.
//
// Several `--key`s are subscribed one after another on the same socket, each once the previous
// one was answered (`subscribed` or `error`). The script exits 0 after `--appends` append frames
// (having kept reading, and printing, for `--linger` ms more, so late duplicates would show), and
// 1 on `--timeout`, on a socket error or when the server closes the socket first.
//
//   node subscribe.mjs --url ws://127.0.0.1:3050/agents/ws --seed <64 hex> --key sessions/<id> \
//       [--key ...] [--after-seq N] [--protocol P] [--text] [--appends N] [--linger MS] [--timeout MS]
//   node subscribe.mjs --whoami --seed <64 hex>    prints {"accountId": "<principal string>"}
//
// The seed may also come from SEED_AGENTS_SEED, the URL from SEED_AGENTS_WS_URL.

import {parseArgs} from 'node:util'
import * as blobs from '@seed-hypermedia/client/blobs'
import * as cbor from '@seed-hypermedia/client/cbor'
import WebSocket from 'ws'

const {values: args} = parseArgs({
  options: {
    url: {type: 'string'},
    seed: {type: 'string'},
    key: {type: 'string', multiple: true},
    'after-seq': {type: 'string'},
    protocol: {type: 'string'},
    text: {type: 'boolean', default: false},
    appends: {type: 'string', default: '0'},
    linger: {type: 'string', default: '0'},
    timeout: {type: 'string', default: '10000'},
    whoami: {type: 'boolean', default: false},
  },
  strict: true,
})

function fail(message) {
  process.stderr.write(`subscribe.mjs: ${message}\n`)
  process.exit(1)
}

function integer(name, text) {
  if (text === undefined) return undefined
  const value = Number(text)
  if (!Number.isSafeInteger(value)) fail(`--${name} must be an integer, got ${JSON.stringify(text)}`)
  return value
}

const seedHex = args.seed ?? process.env.SEED_AGENTS_SEED
if (!seedHex || !/^[0-9a-fA-F]{64}$/.test(seedHex)) fail('--seed (or SEED_AGENTS_SEED) must be 64 hex digits')
const keyPair = blobs.nobleKeyPairFromSeed(Uint8Array.from(Buffer.from(seedHex, 'hex')))
const accountUid = blobs.principalToString(keyPair.principal)

if (args.whoami) {
  process.stdout.write(`${JSON.stringify({accountId: accountUid})}\n`)
  process.exit(0)
}

const url = args.url ?? process.env.SEED_AGENTS_WS_URL
if (!url) fail('--url (or SEED_AGENTS_WS_URL) is required')
const keys = args.key ?? []
if (keys.length === 0) fail('at least one --key is required')
const afterSeq = integer('after-seq', args['after-seq'])
const protocol = integer('protocol', args.protocol)
const wantAppends = integer('appends', args.appends)
const lingerMs = integer('linger', args.linger)
const timeoutMs = integer('timeout', args.timeout)

// Members whose value is undefined are left out, at every depth (CBOR has no `undefined`).
function withoutUndefined(value) {
  if (Array.isArray(value)) return value.map(withoutUndefined)
  if (value === null || typeof value !== 'object' || value instanceof Uint8Array) return value
  const out = {}
  for (const [name, member] of Object.entries(value)) {
    if (member !== undefined) out[name] = withoutUndefined(member)
  }
  return out
}

let lastTs = 0

// Signs an agents action as the desktop app does; `protocol` only when asked for.
async function signAction(action) {
  // Two subscribes of the same key in the same millisecond would be byte-identical envelopes,
  // which the server refuses as a replay: wait for the clock to move on.
  while (Date.now() <= lastTs) await new Promise((resolve) => setTimeout(resolve, 1))
  const ts = Date.now()
  lastTs = ts
  const blob = {
    type: 'AgentsAction',
    signer: keyPair.principal,
    sig: new Uint8Array(blobs.ED25519_SIGNATURE_SIZE),
    account: blobs.principalFromString(accountUid),
    action: {...withoutUndefined(action), ts},
  }
  if (protocol !== undefined) blob.protocol = protocol
  return blobs.sign(keyPair, blob)
}

const ws = new WebSocket(url)
ws.binaryType = 'arraybuffer'
let pending // the key whose answer is awaited
let next = 0
let appends = 0
let finished = false
let lingering = false

// All keys answered and enough appends: stop, after lingering if asked to.
function done() {
  if (lingering) return
  lingering = true
  if (lingerMs > 0) setTimeout(() => finish(0), lingerMs)
  else finish(0)
}

function finish(code, note) {
  if (finished) return
  finished = true
  clearTimeout(timer)
  if (note) process.stderr.write(`subscribe.mjs: ${note}\n`)
  if (code === 0) {
    ws.once('close', () => process.exit(0))
    ws.close(1000)
    setTimeout(() => process.exit(0), 1000).unref()
  } else {
    ws.terminate()
    process.exit(code)
  }
}

const timer = setTimeout(
  () => finish(1, `timeout after ${timeoutMs} ms: ${appends} of ${wantAppends} appends, ${next} of ${keys.length} keys sent`),
  timeoutMs,
)

async function subscribeNext() {
  if (next >= keys.length) {
    pending = undefined
    if (appends >= wantAppends) done()
    return
  }
  const key = keys[next++]
  pending = key
  const envelope = await signAction({_: 'Subscribe', key, afterSeq})
  const bytes = cbor.encode(envelope)
  if (ws.readyState !== WebSocket.OPEN) return
  if (args.text) ws.send(JSON.stringify(Array.from(bytes)))
  else ws.send(bytes)
  process.stderr.write(
    `subscribe.mjs: sent Subscribe ${JSON.stringify({key, afterSeq})} as a ${args.text ? 'text' : 'binary'} frame ` +
      `(${bytes.length} bytes, protocol ${protocol ?? 'absent'}) as ${accountUid}\n`,
  )
}

ws.addEventListener('open', () => {
  subscribeNext().catch((error) => finish(1, `signing failed: ${error?.stack ?? error}`))
})

ws.addEventListener('message', (event) => {
  const text = typeof event.data === 'string' ? event.data : new TextDecoder().decode(event.data)
  let frame
  try {
    frame = JSON.parse(text)
  } catch {
    process.stdout.write(`${JSON.stringify({malformed: text})}\n`)
    return
  }
  process.stdout.write(`${JSON.stringify(frame)}\n`)
  if (frame?._ === 'append') appends += 1
  const answered =
    pending !== undefined &&
    ((frame?._ === 'subscribed' && frame.key === pending) ||
      (frame?._ === 'error' && (frame.key === pending || frame.key === undefined)))
  if (answered) subscribeNext().catch((error) => finish(1, `signing failed: ${error?.stack ?? error}`))
  else if (wantAppends > 0 && appends >= wantAppends && pending === undefined) done()
})

ws.addEventListener('error', (event) => finish(1, `socket error: ${event.message ?? event.error ?? event}`))
ws.addEventListener('close', (event) => finish(1, `the server closed the socket: ${event.code} ${event.reason}`))
