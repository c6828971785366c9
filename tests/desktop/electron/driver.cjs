#!/usr/bin/env node
// electron-updater itself, run by Node outside Electron, as electron-builder's own tests run it
// (test/src/helpers/TestAppAdapter.ts, updaterTestUtil.ts): an app adapter of our own in place
// of Electron's `app`, Node's http in place of Electron's `net`, and the updater told which
// platform it is on (`_testOnlyOptions`). Everything else is the package's own code: the generic
// provider reading `<channel>[-mac|-linux].yml` from the feed, choosing the file, downloading it
// (differentially from the blockmaps when it can), checking its sha512.
//
// Usage: node driver.cjs '<json>' with
//   feedUrl      the feed's address (`publish: {provider: generic, url}`)
//   channel      electron-builder's channel (`latest` unless given)
//   version      the running app's version
//   platform     "win32" (NsisUpdater, latest.yml, .exe) or "linux" (AppImageUpdater,
//                latest-linux.yml, .AppImage)
//   cacheDir     where the updater keeps what it downloads (its per-app cache)
//   download     download the update found (default true)
//   installed    for a differential download: the installed installer (copied where
//                electron-updater keeps it after an update), with `installedBlockmap`, its
//                blockmap
//   differential let electron-updater try the blockmaps (default false: the whole file)
// Prints one line of JSON: {updateAvailable, version, files, downloaded, sha512, events, log}.
"use strict"

const fs = require("fs")
const http = require("http")
const https = require("https")
const path = require("path")
const crypto = require("crypto")
const { HttpExecutor, configureRequestOptions, configureRequestUrl } = require("builder-util-runtime")
const { AppImageUpdater, NsisUpdater } = require("electron-updater")
const { ElectronAppAdapter } = require("electron-updater/out/ElectronAppAdapter")

const CACHE_NAME = "buildbay-test-app-updater"

// As electron-updater's ElectronHttpExecutor, with Node's http: the download streams through
// builder-util-runtime's doDownload, which checks the sha512 the feed gives (DigestTransform)
// and follows redirects (a presigned S3 address).
class NodeHttpExecutor extends HttpExecutor {
  async download(url, destination, options) {
    return await options.cancellationToken.createPromise((resolve, reject, onCancel) => {
      const requestOptions = { headers: options.headers || undefined }
      configureRequestUrl(url, requestOptions)
      configureRequestOptions(requestOptions)
      this.doDownload(
        requestOptions,
        {
          destination,
          options,
          onCancel,
          callback: error => (error == null ? resolve(destination) : reject(error)),
          responseHandler: null,
        },
        0
      )
    })
  }

  createRequest(options, callback) {
    return (options.protocol === "http:" ? http.request : https.request)(options, callback)
  }
}

class MockApp {
  constructor(version) {
    this.version = version
  }
  getVersion() {
    return this.version
  }
  getName() {
    return "buildbay-test-app"
  }
  getAppPath() {
    return ""
  }
  getPath() {
    throw new Error("must not be called")
  }
  on() {}
  once() {}
  isReady() {
    return true
  }
}

class TestAppAdapter extends ElectronAppAdapter {
  constructor(version, cacheDir) {
    super(new MockApp(version))
    this.cacheDir = cacheDir
  }
  get baseCachePath() {
    return this.cacheDir
  }
  get userDataPath() {
    return this.cacheDir
  }
  get isPackaged() {
    return true
  }
  get appUpdateConfigPath() {
    return path.join(this.cacheDir, "app-update.yml")
  }
  whenReady() {
    return Promise.resolve()
  }
  quit() {}
  onQuit() {}
  onSessionEnd() {}
}

async function main() {
  const options = JSON.parse(process.argv[2])
  const log = []
  const logger = {
    info: m => log.push(`info: ${m}`),
    warn: m => log.push(`warn: ${m}`),
    error: m => log.push(`error: ${m}`),
    debug: m => log.push(`debug: ${m}`),
  }
  const platform = options.platform || "linux"
  const adapter = new TestAppAdapter(options.version, options.cacheDir)
  const Updater = platform === "win32" ? NsisUpdater : AppImageUpdater
  if (platform !== "win32") {
    // AppImageUpdater updates the AppImage the app runs from: the installed copy.
    process.env.APPIMAGE = options.installed || path.join(options.cacheDir, "current.AppImage")
  }
  // What electron-builder writes into an app's resources (app-update.yml): where its cache is.
  fs.mkdirSync(options.cacheDir, { recursive: true })
  fs.writeFileSync(
    adapter.appUpdateConfigPath,
    `provider: generic\nurl: ${JSON.stringify(options.feedUrl)}\nupdaterCacheDirName: ${CACHE_NAME}\n`
  )
  const updater = new Updater(null, adapter)
  updater.httpExecutor = new NodeHttpExecutor()
  updater._testOnlyOptions = { platform, isUseDifferentialDownload: Boolean(options.differential) }
  updater.logger = logger
  updater.autoDownload = false
  updater.autoInstallOnAppQuit = false
  updater.disableDifferentialDownload = !options.differential
  updater.setFeedURL({ provider: "generic", url: options.feedUrl, channel: options.channel || null })

  if (options.installed && platform === "win32") {
    // Where an installed app keeps the installer of its last update, and its blockmap: what
    // a differential download starts from (AppUpdater.differentialDownloadInstaller).
    const helperDir = path.join(options.cacheDir, CACHE_NAME)
    fs.mkdirSync(helperDir, { recursive: true })
    fs.copyFileSync(options.installed, path.join(helperDir, "installer.exe"))
    if (options.installedBlockmap) {
      fs.copyFileSync(options.installedBlockmap, path.join(helperDir, "current.blockmap"))
    }
  }

  const events = []
  for (const name of ["checking-for-update", "update-available", "update-not-available", "update-downloaded", "error"]) {
    updater.on(name, () => events.push(name))
  }
  const result = { updateAvailable: false, version: null, files: [], downloaded: null, sha512: null, events, log }
  try {
    const check = await updater.checkForUpdates()
    result.updateAvailable = Boolean(check && check.isUpdateAvailable)
    if (check) {
      result.version = check.updateInfo.version
      result.files = check.updateInfo.files
      result.stagingPercentage = check.updateInfo.stagingPercentage ?? null
    }
    if (result.updateAvailable && options.download !== false) {
      const downloaded = await updater.downloadUpdate()
      result.downloaded = downloaded[0]
      // What electron-updater verified (it refuses a file whose sha512 differs), computed again.
      const hash = crypto.createHash("sha512")
      hash.update(fs.readFileSync(downloaded[0]))
      result.sha512 = hash.digest("base64")
    }
  } catch (e) {
    result.error = { message: String(e && e.message), code: (e && e.code) || null }
  }
  process.stdout.write(JSON.stringify(result) + "\n")
}

main().catch(e => {
  process.stdout.write(JSON.stringify({ error: { message: String(e && e.stack), code: null } }) + "\n")
  process.exitCode = 1
})
