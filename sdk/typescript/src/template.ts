// Template: the project's custom templates (docs/templates.md). Build one
// from a recipe, then CodeSandbox.create({ template: name }).

import { InvalidArgumentError, SandboxError, TemplateBuildError } from './errors.js';
import { HttpClient, resolveConfig, type ConnectionOptions } from './http.js';

/** A file of a recipe: its content as a string (UTF-8) or bytes; the SDK encodes it. */
export interface RecipeFile {
  path: string;
  content: string | Uint8Array;
  /** Permission bits; default 0o644. */
  mode?: number;
  owner?: 'user' | 'root';
}

/** What a custom template is made of, on top of a built-in base (docs/templates.md). */
export interface Recipe {
  base?: string;
  /** An OCI/Docker image to build on instead of a built-in base (by tag or digest); not with base, apt or pip. */
  from?: string;
  apt?: string[];
  pip?: string[];
  files?: RecipeFile[];
  env?: Record<string, string>;
  workdir?: string;
  run?: RecipeCommand[];
  /** Run at every boot in the background; template snapshots hold it running. */
  start?: string;
  /** Exits 0 once start is ready: polled at boot; the template snapshot waits for it. */
  ready?: string;
  /** Steps in order, after the fixed parts above: each exactly one kind. */
  steps?: RecipeStep[];
}

/** A build command, run by /bin/sh -ec in the build sandbox (no network). */
export interface RecipeCommand {
  cmd: string;
  user?: 'root' | 'user';
}

/**
 * One step of a recipe: exactly one field. env, workdir and user hold for
 * later steps and for the sandbox's code (docs/templates.md).
 */
export interface RecipeStep {
  run?: RecipeCommand;
  copy?: RecipeFile[];
  env?: Record<string, string>;
  workdir?: string;
  user?: 'root' | 'user';
  apt?: string[];
  pip?: string[];
  symlink?: { target: string; path: string };
  /** npm packages, fetched on the host with no script run: in the working directory's node_modules, or global in /usr/local. */
  npm?: { packages: string[]; global?: boolean; dev?: boolean };
}

/** One line of a build's progress: a step, a line of output, then done or error. */
export interface TemplateBuildEvent {
  type: 'step' | 'log' | 'done' | 'error' | string;
  step?: number;
  total?: number;
  name?: string;
  text?: string;
  cached?: boolean;
  template?: WireTemplate;
  code?: string;
  message?: string;
  log?: string;
}

/** A custom template of the project. */
export interface TemplateInfo {
  name: string;
  base: string;
  /** The hash of its recipe and base: a build is cached under it. */
  key: string;
  createdAt: Date;
  /** How long its build took (0 when it was found in the cache). */
  buildMs: number;
  sizeBytes: number;
  /** Its recipe as sent, file contents left out. */
  recipe: Record<string, unknown>;
  /** For a template built on an image (recipe.from): the digest of the image it was built from. */
  digest?: string;
}

interface WireTemplate {
  name: string;
  base: string;
  key: string;
  digest?: string;
  createdAt: string;
  buildMs: number;
  sizeBytes: number;
  recipe: Record<string, unknown>;
}

function templateInfo(w: WireTemplate): TemplateInfo {
  return {
    name: w.name,
    base: w.base,
    key: w.key,
    createdAt: new Date(w.createdAt),
    buildMs: w.buildMs ?? 0,
    sizeBytes: w.sizeBytes ?? 0,
    recipe: w.recipe ?? {},
    ...(w.digest ? { digest: w.digest } : {}),
  };
}

export interface BuildOptions extends ConnectionOptions {
  /** Called with each progress event as it comes. */
  onEvent?: (event: TemplateBuildEvent) => void;
  /** Bounds the whole build in milliseconds (default 30 minutes). */
  timeoutMs?: number;
  /** Credentials for the registry of recipe.from's image, sent with this build only (never stored):
   * a password, or passwordSecret, the name of the project's secret that holds it (docs/secrets.md). */
  registry?: RegistryCredentials;
  /** Run every step again, even when the project has a build of the recipe or of a prefix of its steps. */
  skipCache?: boolean;
}

/** A registry's username with its password, or with the name of the project's secret holding it. */
export type RegistryCredentials = { username: string; password: string } | { username: string; passwordSecret: string };

/** templateBody is the wire body of a build: file contents in base64. */
export function templateBody(
  name: string,
  recipe: Recipe,
  registry?: RegistryCredentials,
  skipCache?: boolean,
): Record<string, unknown> {
  const encode = (files: RecipeFile[], field: string) =>
    files.map((f, i) => {
      if (typeof f.content !== 'string' && !(f.content instanceof Uint8Array)) {
        throw new InvalidArgumentError(`recipe ${field}[${i}].content must be a string or a Uint8Array`);
      }
      return { ...f, content: Buffer.from(f.content).toString('base64') };
    });
  const body: Record<string, unknown> = { ...recipe };
  if (recipe.files && recipe.files.length > 0) body.files = encode(recipe.files, 'files');
  if (recipe.steps) {
    body.steps = recipe.steps.map((s, i) => (s.copy ? { ...s, copy: encode(s.copy, `steps[${i}].copy`) } : s));
  }
  const out: Record<string, unknown> = { name, recipe: body };
  if (registry) {
    out.registry =
      'passwordSecret' in registry
        ? { username: registry.username, passwordSecret: registry.passwordSecret }
        : { username: registry.username, password: registry.password };
  }
  if (skipCache) out.skipCache = true;
  return out;
}

/** Custom templates of the key's project. */
export class Template {
  /**
   * build builds (or finds in the cache) template name from recipe and
   * returns it. A failed step throws TemplateBuildError with the step and
   * its last output.
   */
  static async build(name: string, recipe: Recipe, opts: BuildOptions = {}): Promise<TemplateInfo> {
    const http = new HttpClient(resolveConfig(opts));
    const body = templateBody(name, recipe, opts.registry, opts.skipCache);
    for await (const ev of http.stream<TemplateBuildEvent>('POST', '/v1/templates', {
      json: body,
      timeoutMs: opts.timeoutMs ?? 30 * 60_000,
    })) {
      opts.onEvent?.(ev);
      if (ev.type === 'done' && ev.template) return templateInfo(ev.template);
      if (ev.type === 'error') {
        throw new TemplateBuildError(ev.message ?? 'the template build failed', { code: ev.code, step: ev.name, log: ev.log });
      }
    }
    throw new SandboxError("the template build's stream ended without its outcome");
  }

  /** list returns the project's custom templates by name. */
  static async list(opts: ConnectionOptions = {}): Promise<TemplateInfo[]> {
    const http = new HttpClient(resolveConfig(opts));
    const w = await http.request<{ templates: WireTemplate[] | null }>('GET', '/v1/templates');
    return (w.templates ?? []).map(templateInfo);
  }

  /** get returns one template; NotFoundError when the project has none of that name. */
  static async get(name: string, opts: ConnectionOptions = {}): Promise<TemplateInfo> {
    const http = new HttpClient(resolveConfig(opts));
    return templateInfo(await http.request<WireTemplate>('GET', `/v1/templates/${encodeURIComponent(name)}`));
  }

  /** delete removes a template; ConflictError while live sandboxes of the project use it. */
  static async delete(name: string, opts: ConnectionOptions = {}): Promise<void> {
    const http = new HttpClient(resolveConfig(opts));
    await http.request<unknown>('DELETE', `/v1/templates/${encodeURIComponent(name)}`);
  }
}
