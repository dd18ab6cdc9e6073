// The realm's prelude (docs/workflows.md), evaluated before the workflow's source. It builds
// `ctx`, keeps the promises of effects the host has not answered yet, and takes away what a
// replay could not reproduce. The host installs three natives before it runs and this file hides
// them: `__host_enqueue(op, id, argsJson)` asks for an effect, `__host_progress(patchJson)`
// reports live progress, `__host_finish(ok, json)` ends the execution. The host then calls the
// two globals this file defines: `__kickoff(inputJson, runId)` once, and
// `__deliver(id, ok, valueJson)` for each answered effect.
"use strict";
var __workflow_main;
(function (global, enqueue, reportProgress, finish) {
  var stringify = JSON.stringify;
  var parse = JSON.parse;
  var EngineError = global.InternalError;
  var waiting = new Map();
  var lastId = 0;

  // A rejected effect as the script sees it: a stable `code`, and the failed call's identity so
  // that, if it escapes uncaught, the run's error still says which call it was.
  class EffectError extends Error {
    constructor(info) {
      var fields = info !== null && typeof info === "object" ? info : {};
      super(typeof fields.message === "string" ? fields.message : "The effect failed");
      this.name = "EffectError";
      this.code = typeof fields.code === "string" && fields.code ? fields.code : "tool-error";
      this.retryable = fields.retryable === true;
      if (typeof fields.tool === "string") this.tool = fields.tool;
      if (typeof fields.callSeq === "number") this.callSeq = fields.callSeq;
      if (fields.detail !== undefined) this.detail = fields.detail;
      // Its construction stack is this file's delivery, never the script's await.
      Object.defineProperty(this, "stack", { value: undefined, writable: true, configurable: true });
    }
  }

  function request(op, args) {
    var argsJson = stringify(args);
    var id = ++lastId;
    var promise = new Promise(function (resolve, reject) {
      waiting.set(id, { resolve: resolve, reject: reject });
    });
    enqueue(op, id, argsJson);
    return promise;
  }

  function deliver(id, ok, valueJson) {
    var waiter = waiting.get(id);
    if (waiter === undefined) return;
    waiting.delete(id);
    var value = parse(valueJson);
    if (ok) waiter.resolve(value);
    else waiter.reject(new EffectError(value));
  }

  function unavailable(what, instead) {
    return function () {
      throw new Error(what + " is not available in workflows: " + instead);
    };
  }

  function makeCtx(input, runId) {
    var stepCount = 0;
    // Labels of the `ctx.step` blocks running, innermost last: a child spawned inside one is
    // attached to it.
    var openSteps = [];

    function closeStep(label) {
      var at = openSteps.lastIndexOf(label);
      if (at >= 0) openSteps.splice(at, 1);
    }

    function delegate(spec) {
      var step = openSteps.length > 0 ? openSteps[openSteps.length - 1] : undefined;
      return request("agent", { spec: spec, step: step }).then(function (child) {
        var resolution = child !== null && typeof child === "object" ? child : {};
        if (resolution.status === "succeeded") return resolution.output;
        var error = resolution.error !== null && typeof resolution.error === "object" ? resolution.error : {};
        var canceled = resolution.status === "canceled";
        throw new EffectError({
          code: canceled ? "child-canceled" : typeof error.code === "string" ? error.code : "child-failed",
          message:
            typeof error.message === "string"
              ? error.message
              : "The child run " + (canceled ? "was canceled" : "failed"),
        });
      });
    }

    function startAll(items, settled) {
      var started = Array.prototype.map.call(items, function (item) {
        return Promise.resolve().then(function () {
          return typeof item === "function" ? item() : item;
        });
      });
      return settled ? Promise.allSettled(started) : Promise.all(started);
    }

    function step(label, body) {
      var stepId = "step-" + ++stepCount;
      var name = String(label);
      function end(ok) {
        closeStep(name);
        return request("step", { stepId: stepId, label: name, phase: "end", ok: ok });
      }
      return request("step", { stepId: stepId, label: name, phase: "start" }).then(function () {
        openSteps.push(name);
        return Promise.resolve()
          .then(body)
          .then(
            function (value) {
              return end(true).then(function () {
                return value;
              });
            },
            function (error) {
              return end(false).then(function () {
                throw error;
              });
            }
          );
      });
    }

    return Object.freeze({
      input: input,
      runId: runId,
      call: function (tool, toolInput, options) {
        return request("tool", { tool: tool, input: toolInput, opts: options });
      },
      delegate: delegate,
      agent: delegate,
      sleep: function (ms) {
        return request("sleep", { ms: ms });
      },
      waitForEvent: function (match, options) {
        return request("wait", { match: match, opts: options });
      },
      // Ends this run; a successor carries `state` on. Never resolves.
      continueAsNew: function (state) {
        return request("continueAsNew", { state: state });
      },
      now: function () {
        return request("now", {});
      },
      log: function (level, message, data) {
        return request("log", { level: level, message: message, data: data });
      },
      progress: function (patch) {
        reportProgress(stringify(patch === undefined ? null : patch));
      },
      plan: function (plan) {
        return request("plan", { plan: plan });
      },
      step: step,
      parallel: function (thunks) {
        return startAll(thunks, false);
      },
      parallelSettled: function (thunks) {
        return startAll(thunks, true);
      },
      minutes: function (n) {
        return n * 60000;
      },
      hours: function (n) {
        return n * 3600000;
      },
    });
  }

  // The terminal error as the host reads it. `resource` marks what the engine throws when it
  // runs out of memory: its own InternalError (also used for a string past its maximum length),
  // or `null` when it could not allocate even that.
  function describe(error) {
    try {
      var info = { code: "workflow-error", message: "" };
      if (error === null) {
        info.message = "the workflow ran out of memory";
        info.resource = true;
      } else if (typeof error === "object") {
        if (typeof error.code === "string" && error.code) info.code = error.code;
        info.message = error.message !== undefined ? String(error.message) : String(error);
        if (typeof error.stack === "string" && error.stack) {
          // The script's frames only: this file's are the same in every run.
          var frames = error.stack.split("\n").filter(function (frame) {
            return frame.indexOf("(prelude.js:") < 0;
          });
          info.stack = frames.join("\n");
        }
        if (typeof error.tool === "string") info.tool = error.tool;
        if (typeof error.callSeq === "number") info.callSeq = error.callSeq;
        if (EngineError !== undefined && error instanceof EngineError) info.resource = true;
      } else {
        info.message = String(error);
      }
      return stringify(info);
    } catch (_) {
      return '{"code":"workflow-error","message":"the workflow failed with an error that could not be read"}';
    }
  }

  function kickoff(inputJson, runId) {
    var ctx = makeCtx(parse(inputJson), runId);
    new Promise(function (resolve) {
      var main = __workflow_main;
      if (typeof main !== "function") throw new TypeError("the default export must be a function");
      resolve(main(ctx.input, ctx));
    }).then(
      function (value) {
        var json;
        try {
          json = stringify(value === undefined ? null : value);
        } catch (error) {
          finish(false, describe(error));
          return;
        }
        finish(true, json === undefined ? "null" : json);
      },
      function (error) {
        finish(false, describe(error));
      }
    );
  }

  function fixed(name, value) {
    Object.defineProperty(global, name, { value: value, writable: false, enumerable: false, configurable: false });
  }
  fixed("__kickoff", kickoff);
  fixed("__deliver", deliver);
  fixed("__describe", describe);
  delete global.__host_enqueue;
  delete global.__host_progress;
  delete global.__host_finish;

  // No ambient nondeterminism: the clock and randomness come through ctx or the input.
  var NoDate = unavailable("Date", "use `await ctx.now()` for the current time");
  NoDate.now = NoDate;
  NoDate.parse = NoDate;
  NoDate.UTC = NoDate;
  fixed("Date", NoDate);
  Object.defineProperty(Math, "random", {
    value: unavailable("Math.random", "pass randomness in as workflow input"),
    writable: false,
    enumerable: false,
    configurable: false,
  });
})(globalThis, __host_enqueue, __host_progress, __host_finish);
