// Starts `llamapp serve` for the SDK tests on a free port and resolves once it listens.
// LLAMAPP_BIN: the llamapp binary; LLAMAPP_MODEL: a GGUF with a real tokenizer and chat template.
import { spawn } from "node:child_process";

const bin = process.env.LLAMAPP_BIN;
const modelPath = process.env.LLAMAPP_MODEL;
if (!bin || !modelPath) throw new Error("LLAMAPP_BIN and LLAMAPP_MODEL must be set");

// `env` is added to this process's environment; a variable given as undefined is removed.
export function startServer(args, env = {}) {
  const childEnv = { ...process.env };
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) delete childEnv[name];
    else childEnv[name] = value;
  }
  return new Promise((resolve, reject) => {
    const child = spawn(bin, ["serve", "--port", "0", "-m", modelPath, ...args], {
      stdio: ["ignore", "ignore", "pipe"],
      env: childEnv,
    });
    let log = "";
    const timer = setTimeout(() => reject(new Error("the server did not start:\n" + log)), 60000);
    child.stderr.on("data", (chunk) => {
      log += chunk;
      const m = log.match(/serving on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ child, port: Number(m[1]) });
      }
    });
    child.on("exit", (code) => reject(new Error(`the server exited (${code}):\n${log}`)));
  });
}
