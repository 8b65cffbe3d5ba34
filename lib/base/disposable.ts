/**
 * `Symbol.dispose`, which every resource of the library implements, declared for projects whose
 * TypeScript setup does not (no `esnext.disposable` in `lib`, no @types/node). It is the same
 * declaration as TypeScript's own and @types/node's, so all of them merge into one.
 */
declare global {
  interface SymbolConstructor {
    readonly dispose: unique symbol;
  }
}
export {};
